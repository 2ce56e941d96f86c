package plegdprocessor

import (
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// lruCache is a bounded least-recently-used map (hashicorp/golang-lru) whose entries
// also expire, each after its own time to live, on the resolver's clock. It holds
// GetContainer answers, found and not found, and the placements made from the
// informer's copy.
type lruCache[V any] struct {
	// mu makes a get that drops an expired entry one step with the puts: without it,
	// a fresh entry put between the lookup and the removal would be removed.
	mu  sync.Mutex
	c   *lru.Cache[string, expiring[V]]
	now func() time.Time
}

type expiring[V any] struct {
	val     V
	expires time.Time
}

func newLRU[V any](size int, now func() time.Time) *lruCache[V] {
	c, err := lru.New[string, expiring[V]](max(size, 1))
	if err != nil {
		panic(err) // only for a size below 1, which max(…, 1) rules out
	}
	return &lruCache[V]{c: c, now: now}
}

// get returns the entry if it is there and has not expired (an expired one is dropped).
func (c *lruCache[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	e, ok := c.c.Get(key)
	if !ok {
		return zero, false
	}
	if !c.now().Before(e.expires) {
		c.c.Remove(key)
		return zero, false
	}
	return e.val, true
}

// put keeps val under key for ttl, evicting the least recently used entry past the
// bound.
func (c *lruCache[V]) put(key string, val V, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c.Add(key, expiring[V]{val: val, expires: c.now().Add(ttl)})
}

func (c *lruCache[V]) remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c.Remove(key)
}

func (c *lruCache[V]) len() int {
	return c.c.Len()
}
