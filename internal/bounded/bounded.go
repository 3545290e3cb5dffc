// Package bounded holds the state rebound keeps per peer (a host, a server
// name) in a map of bounded size, so that a long-lived client that talks to
// ever new peers keeps state for the recent ones only.
//
// The front doors follow one rule. What clients share process-wide (A6
// throttles, adaptive throttles, adaptive rate limiters) is held weakly in
// a [Shared]: it lives while a client holds it. What a
// client keeps per peer lives in a [Map] of at most [DefaultMax] entries
// (grpcretry keeps it per ClientConn instead, and drops it when the conn
// is collected). When a Map is full, a new peer evicts peers that were not
// used since the last eviction (the CLOCK approximation of least recently
// used); an evicted peer that comes back starts afresh, its budget full.
package bounded

import (
	"sync"
	"sync/atomic"
)

// DefaultMax is the number of peers a client keeps state for.
const DefaultMax = 1024

// Map maps keys to values made on first use, holding at most a fixed
// number. A lookup of a present key takes no lock. The zero value is not
// usable; use [New]. A Map is safe for concurrent use.
type Map[K comparable, V any] struct {
	max int
	m   sync.Map   // K -> *entry[V]
	mu  sync.Mutex // serializes making and evicting entries
	n   int        // guarded by mu: the entries in m
}

type entry[V any] struct {
	v    V
	used atomic.Bool // looked up since the last eviction
}

// New returns an empty Map of at most limit entries (at least 1).
func New[K comparable, V any](limit int) *Map[K, V] {
	return &Map[K, V]{max: max(limit, 1)}
}

// Get returns the value of k, made with mk the first time, or the first
// time after k was evicted. An error from mk is returned, and nothing is
// kept.
func (m *Map[K, V]) Get(k K, mk func() (V, error)) (V, error) {
	if v, ok := m.m.Load(k); ok {
		return v.(*entry[V]).touch(), nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.m.Load(k); ok {
		return v.(*entry[V]).touch(), nil
	}
	v, err := mk()
	if err != nil {
		return v, err
	}
	if m.n >= m.max {
		m.evict()
	}
	e := &entry[V]{v: v}
	e.used.Store(true) // new: spared by the next eviction
	m.m.Store(k, e)
	m.n++
	return v, nil
}

// touch marks e used, writing only when it was not, so that lookups of a
// busy key do not contend on its cache line.
func (e *entry[V]) touch() V {
	if !e.used.Load() {
		e.used.Store(true)
	}
	return e.v
}

// evict removes an eighth of the entries (at least one): those not used
// since the last eviction first, clearing the mark of the others as it
// passes them, then any. Called with mu held.
func (m *Map[K, V]) evict() {
	want, gone := max(m.max/8, 1), 0
	for pass := 0; pass < 2 && gone < want; pass++ {
		m.m.Range(func(k, v any) bool {
			if e := v.(*entry[V]); pass == 0 && e.used.Load() {
				e.used.Store(false)
				return true
			}
			m.m.Delete(k)
			m.n--
			gone++
			return gone < want
		})
	}
}

// Len returns the number of entries.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}
