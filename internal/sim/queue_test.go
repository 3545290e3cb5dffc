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
