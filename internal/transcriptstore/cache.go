package transcriptstore

import (
	"container/list"
	"sync"

	"github.com/turnstile-rl/turnstile/internal/transcript"
)

// DefaultCacheItems bounds the conversation cache: the items of all cached
// conversations together (each item is a small struct whose strings are
// shared with the other conversations that hold it).
const DefaultCacheItems = 1 << 18

// convCache remembers decoded conversations by head, least recently used
// out first. Blobs are content-addressed and never change, so a cached
// conversation can never be stale; it saves the model activity from
// reading the whole chain (two files per item) on every call, which made a
// rollout read O(turns²) files. The cached slices are never handed out:
// callers get copies.
type convCache struct {
	mu    sync.Mutex
	limit int
	size  int
	order *list.List // of *convEntry, most recent first
	byKey map[transcript.Digest]*list.Element
}

type convEntry struct {
	head  transcript.Digest
	items []transcript.Item
}

func newConvCache(limit int) *convCache {
	return &convCache{limit: limit, order: list.New(), byKey: map[transcript.Digest]*list.Element{}}
}

// get returns the cached conversation at head (not a copy: do not modify).
func (c *convCache) get(head transcript.Digest) ([]transcript.Item, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[head]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*convEntry).items, true
}

// put caches items (which the cache then owns) as the conversation at head.
func (c *convCache) put(head transcript.Digest, items []transcript.Item) {
	if c == nil || len(items) > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[head]; ok {
		return
	}
	c.byKey[head] = c.order.PushFront(&convEntry{head: head, items: items})
	c.size += len(items)
	for c.size > c.limit {
		last := c.order.Back()
		e := last.Value.(*convEntry)
		c.order.Remove(last)
		delete(c.byKey, e.head)
		c.size -= len(e.items)
	}
}
