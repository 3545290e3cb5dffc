package sim

import "time"

// The simulations spend most of their time in their event queues, and the
// README's `go test -race` runs them under the race detector, which
// charges for every call and every allocation: so the rate-limited
// scenario's queue is typed, and allocates only to grow.

// timed is a value that falls due at a virtual time.
type timed[V any] struct {
	at  time.Duration
	seq uint64 // orders what falls due at the same instant by when it was made
	v   V
}

// before reports whether a falls due before b.
func (a *timed[V]) before(b *timed[V]) bool {
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

// timedHeap is a binary min-heap by [timed.before].
type timedHeap[V any] []timed[V]

// head returns the earliest element, or nil; it stays valid until the next
// push or pop.
func (h timedHeap[V]) head() *timed[V] {
	if len(h) == 0 {
		return nil
	}
	return &h[0]
}

func (h *timedHeap[V]) push(x timed[V]) {
	q := append(*h, x)
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q[i].before(&q[parent]) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
	*h = q
}

// pop removes and returns the earliest element; h must not be empty.
func (h *timedHeap[V]) pop() timed[V] {
	q := *h
	x := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = timed[V]{} // drop what V points to
	q = q[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(q) && q[l].before(&q[least]) {
			least = l
		}
		if r < len(q) && q[r].before(&q[least]) {
			least = r
		}
		if least == i {
			break
		}
		q[i], q[least] = q[least], q[i]
		i = least
	}
	*h = q
	return x
}
