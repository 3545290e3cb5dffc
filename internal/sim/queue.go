package sim

import "time"

// The simulations spend most of their time in their event queues, and the
// README's `go test -race` runs them under the race detector, which
// charges for every call and every allocation: so the queues are typed,
// and allocate only to grow. BenchmarkRun measures them (3.76M allocations
// per run with container/heap, which boxes every event in an interface;
// 1.34M with these).

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

// fifo is a queue of elements pushed in the order they fall due.
type fifo[V any] struct {
	buf  []timed[V]
	next int // index in buf of the head
}

func (f *fifo[V]) push(x timed[V]) {
	// Reuse the space of popped elements once they are half of buf, so
	// that buf stays about twice the most elements pending at once.
	if f.next > 0 && f.next >= len(f.buf)/2 {
		n := copy(f.buf, f.buf[f.next:])
		f.buf, f.next = f.buf[:n], 0
	}
	f.buf = append(f.buf, x)
}

// head returns the earliest element, or nil; it stays valid until the next
// push or pop.
func (f *fifo[V]) head() *timed[V] {
	if f.next == len(f.buf) {
		return nil
	}
	return &f.buf[f.next]
}

// pop removes and returns the earliest element; f must not be empty.
func (f *fifo[V]) pop() timed[V] {
	x := f.buf[f.next]
	f.buf[f.next] = timed[V]{} // drop what V points to
	f.next++
	return x
}

// eventQueue holds an engine's pending events and gives them back in
// (at, seq) order, as one min-heap would, with most of them in no heap. An
// answer reaches its client a fixed time after its attempt was sent
// (Latency when served, refusalDelay when refused), and attempts are sent
// in time order, so the answers of each kind are made in the order they
// fall due and a FIFO holds them. Only retries, whose delays vary, go to
// the heap.
type eventQueue struct {
	served, refused fifo[event]
	retries         timedHeap[event]
}

// queueID names one of an eventQueue's queues.
type queueID uint8

const (
	servedQueue queueID = iota
	refusedQueue
	retryHeap
)

// push adds x. An answer must fall due no earlier than every
// answer of its kind already pushed: the engine's now never goes back, and
// each kind has one delay.
func (q *eventQueue) push(x timed[event]) {
	switch {
	case x.v.kind == sendAttempt:
		q.retries.push(x)
	case x.v.ok:
		q.served.push(x)
	default:
		q.refused.push(x)
	}
}

// earliest returns the earliest pending event and which queue holds it,
// for pop; nil when q is empty. The event stays valid until the next push
// or pop.
func (q *eventQueue) earliest() (*timed[event], queueID) {
	x, id := q.served.head(), servedQueue
	if h := q.refused.head(); h != nil && (x == nil || h.before(x)) {
		x, id = h, refusedQueue
	}
	if h := q.retries.head(); h != nil && (x == nil || h.before(x)) {
		x, id = h, retryHeap
	}
	return x, id
}

// pop removes the head of queue id, which earliest named.
func (q *eventQueue) pop(id queueID) timed[event] {
	switch id {
	case servedQueue:
		return q.served.pop()
	case refusedQueue:
		return q.refused.pop()
	}
	return q.retries.pop()
}
