package replay

import (
	"sync"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		total, perCall int
		ok             bool
	}{
		{16, 1, true}, {1, 1, true}, {0, 0, false}, {10, 20, false}, {10, 0, false}, {-1, -1, false},
	} {
		if err := Check(tc.total, tc.perCall); (err == nil) != tc.ok {
			t.Errorf("Check(%d, %d) = %v", tc.total, tc.perCall, err)
		}
	}
}

func TestReserve(t *testing.T) {
	p := &Pool{Limits: Limits{Total: 10, PerCall: 6}}
	steps := []struct {
		held, n int
		want    bool
		used    int64
	}{
		{0, 6, true, 6},  // a call takes its whole limit
		{6, 1, false, 6}, // and no more
		{0, 7, false, 6}, // a call larger than the limit never fits
		{0, 4, true, 10}, // another call takes what is left
		{0, 1, false, 10},
	}
	for i, s := range steps {
		if got := p.Reserve(s.held, s.n); got != s.want || p.Used() != s.used {
			t.Fatalf("step %d: Reserve(%d, %d) = %v, used %d; want %v, %d", i, s.held, s.n, got, p.Used(), s.want, s.used)
		}
	}
	p.Release(6)
	p.Release(0)
	if !p.Reserve(0, 6) || p.Used() != 10 {
		t.Fatalf("after a release: used %d, want 10", p.Used())
	}
}

// TestReserveConcurrent: calls reserving at once never take more than the
// total between them.
func TestReserveConcurrent(t *testing.T) {
	p := &Pool{Limits: Limits{Total: 100, PerCall: 1}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for range 400 {
		wg.Go(func() {
			if p.Reserve(0, 1) {
				mu.Lock()
				taken++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if taken != 100 || p.Used() != 100 {
		t.Fatalf("%d reservations, %d used; want 100 of 400", taken, p.Used())
	}
}
