package gateway

import (
	"net/http"
	"sync"
	"time"
)

// healthCache keeps each set's health for FeedHealthEvery, shared by the feed
// requests of every caller. A set's health counts its rollouts in
// visibility, a pass over the whole set; a trainer reading page after page
// would otherwise pay that pass for every page. An acknowledgement or a
// submission through this gateway drops the set's entry (it changes what
// the health counts); a change made elsewhere shows within FeedHealthEvery.
type healthCache struct {
	mu   sync.Mutex
	sets map[string]cachedHealth
}

type cachedHealth struct {
	h  Health
	at time.Time
}

// get returns set's health computed within FeedHealthEvery before now.
func (c *healthCache) get(set string, now time.Time) (Health, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.sets[set]
	if !ok || now.Sub(e.at) >= FeedHealthEvery || now.Before(e.at) {
		return Health{}, false
	}
	return e.h, true
}

// put records set's health computed at now, and drops the entries too old
// to be used, so the cache holds only the sets read within FeedHealthEvery.
func (c *healthCache) put(set string, h Health, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sets == nil {
		c.sets = map[string]cachedHealth{}
	}
	for k, e := range c.sets {
		if now.Sub(e.at) >= FeedHealthEvery {
			delete(c.sets, k)
		}
	}
	c.sets[set] = cachedHealth{h: h, at: now}
}

// drop forgets set's health.
func (c *healthCache) drop(set string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sets, set)
}

// feedHealth is set's health for a feed page: the cached one when it is
// recent, else computed (and cached).
func (s *Server) feedHealth(r *http.Request, set string) (Health, error) {
	now := s.cfg.Now()
	if h, ok := s.healths.get(set, now); ok {
		return h, nil
	}
	h, err := s.health(r, set)
	if err != nil {
		return Health{}, err
	}
	s.healths.put(set, h, now)
	return h, nil
}

// maxKnownSets bounds knownSets; when full it starts over.
const maxKnownSets = 4096

// knownSets are the sets this gateway found to exist (with runs or an
// admission). A set does not stop existing while a gateway runs: its
// closed runs stay for the namespace's retention, days.
type knownSets struct {
	mu   sync.Mutex
	sets map[string]bool
}

func (k *knownSets) has(set string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sets[set]
}

func (k *knownSets) add(set string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sets == nil || len(k.sets) >= maxKnownSets {
		k.sets = map[string]bool{}
	}
	k.sets[set] = true
}
