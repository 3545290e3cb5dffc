package bounded

import (
	"runtime"
	"sync"
	"weak"
)

// Shared holds the values of a process that clients share by key (an A6
// throttle, an adaptive throttle or rate limiter per server name and
// settings), weakly: a value lives while a client holds it, in its per-peer
// state, and its entry goes when it is collected, so that a process that
// talks to ever new peers keeps nothing for the peers it has dropped. The
// zero value is ready for use. A Shared is safe for concurrent use.
type Shared[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]weak.Pointer[V]
}

// Get returns the value of k while one is held, else a new one made with
// mk. An error from mk, or a nil value, is returned, and nothing is kept.
func (s *Shared[K, V]) Get(k K, mk func() (*V, error)) (*V, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.m[k].Value(); v != nil {
		return v, nil
	}
	v, err := mk()
	if err != nil || v == nil {
		return v, err
	}
	if s.m == nil {
		s.m = map[K]weak.Pointer[V]{}
	}
	s.m[k] = weak.Make(v)
	runtime.AddCleanup(v, s.drop, k)
	return v, nil
}

// drop removes the entry of a collected value, unless a new one has taken
// its place.
func (s *Shared[K, V]) drop(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[k].Value() == nil {
		delete(s.m, k)
	}
}

// Len returns the number of entries, collected values whose entry has not
// gone yet included.
func (s *Shared[K, V]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
