package sim

import "time"

// The simulations spend much of their time in their event queues, and the
// README's `go test -race` runs them under the race detector, which
// charges for every call, every memory access and every allocation: so
// the queues are typed, allocate only to grow, and keep in a FIFO what
// falls due in the order it is made.

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

// fifo is a queue of values that fall due in the order they are pushed,
// as those made a fixed time after now do: it keeps them in order at a
// fraction of a heap's cost.
type fifo[V any] struct {
	q    []timed[V]
	from int // q[from:] are queued
}

// head returns the first element, or nil; it stays valid until the next
// push or pop.
func (f *fifo[V]) head() *timed[V] {
	if f.from == len(f.q) {
		return nil
	}
	return &f.q[f.from]
}

// push adds x, which must not fall due before the last element pushed.
func (f *fifo[V]) push(x timed[V]) { f.q = append(f.q, x) }

// pop removes and returns the first element; f must not be empty.
func (f *fifo[V]) pop() timed[V] {
	x := f.q[f.from]
	f.q[f.from] = timed[V]{} // drop what V points to
	f.from++
	switch {
	case f.from == len(f.q):
		f.q, f.from = f.q[:0], 0
	case f.from >= 1024 && 2*f.from >= len(f.q):
		// A queue that never empties moves its elements down once the
		// popped half is dead weight, so its array does not grow.
		n := copy(f.q, f.q[f.from:])
		clear(f.q[n:])
		f.q, f.from = f.q[:n], 0
	}
	return x
}
