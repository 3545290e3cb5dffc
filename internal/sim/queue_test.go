package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

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

// TestFIFOOrder pushes values due in order, popping as it goes, past the
// point where the queue moves its elements down.
func TestFIFOOrder(t *testing.T) {
	var f fifo[int]
	next := 0
	for i := range 10_000 {
		f.push(timed[int]{at: time.Duration(i), seq: uint64(i), v: i})
		if i%3 != 0 {
			if got := f.pop(); got.v != next {
				t.Fatalf("pop = %d, want %d", got.v, next)
			}
			next++
		}
	}
	if cap(f.q) > 8192 {
		t.Errorf("capacity %d for at most %d queued", cap(f.q), 10_000-next)
	}
	for ; f.head() != nil; next++ {
		if got := f.pop(); got.v != next {
			t.Fatalf("pop = %d, want %d", got.v, next)
		}
	}
	if next != 10_000 {
		t.Fatalf("%d popped, want 10000", next)
	}
}
