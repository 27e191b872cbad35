package testsupport

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand: Now stands still until Advance.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock is a clock showing start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
