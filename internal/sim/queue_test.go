package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestEventQueueOrder drives an eventQueue as the engine does, the clock
// moving to each event popped and new events falling due a fixed delay
// (answers) or a random one (retries) later, and checks that the events
// come out in (at, seq) order, every one of them once.
func TestEventQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q eventQueue
	var seq uint64
	var now time.Duration
	var made, popped []timed[event]
	add := func() {
		seq++
		x := timed[event]{at: now, seq: seq, v: event{req: int32(seq)}}
		switch rng.IntN(3) {
		case 0:
			x.at += time.Duration(rng.IntN(5)) * time.Millisecond // may tie
			x.v.kind = sendAttempt
		case 1:
			x.at += 100 * time.Millisecond
			x.v.kind, x.v.ok = answer, true
		default:
			x.at += refusalDelay
			x.v.kind = answer
		}
		q.push(x)
		made = append(made, x)
	}
	for range 50 {
		add()
	}
	for {
		head, id := q.earliest()
		if head == nil {
			break
		}
		want := *head
		x := q.pop(id)
		if x != want {
			t.Fatalf("pop gave %+v, earliest said %+v", x, want)
		}
		if x.at < now {
			t.Fatalf("event due at %v popped at %v", x.at, now)
		}
		now = x.at
		popped = append(popped, x)
		for range rng.IntN(3) {
			if len(made) < 20_000 {
				add()
			}
		}
	}
	slices.SortFunc(made, func(a, b timed[event]) int {
		if a.before(&b) {
			return -1
		}
		return 1
	})
	if !slices.Equal(popped, made) {
		t.Fatalf("%d events popped out of order or lost, of %d made", len(popped), len(made))
	}
}

// TestTimedHeapOrder pushes in random order, ties included.
func TestTimedHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var h timedHeap[int]
	var want []timed[int]
	for i := range 1000 {
		x := timed[int]{at: time.Duration(rng.IntN(100)), seq: uint64(i), v: i}
		h.push(x)
		want = append(want, x)
	}
	slices.SortStableFunc(want, func(a, b timed[int]) int { return int(a.at - b.at) })
	for i, w := range want {
		if got := h.pop(); got != w {
			t.Fatalf("pop %d = %+v, want %+v", i, got, w)
		}
	}
	if h.head() != nil {
		t.Fatal("the heap is not empty")
	}
}
