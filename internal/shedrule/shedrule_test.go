package shedrule

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestWindow(t *testing.T) {
	w := NewWindow(time.Second)
	for range 10 {
		w.Admit(t0)
	}
	if ratio, perSec := w.Shed(t0); ratio != 0.1 || perSec != 1 {
		t.Fatalf("ratio %v, per second %v; want 0.1, 1", ratio, perSec)
	}
	// Half a second on: all still in the window; a refusal is one fewer
	// served and one more rejected.
	if ratio, _ := w.Refuse(t0.Add(500 * time.Millisecond)); ratio != 2.0/9 {
		t.Fatalf("ratio %v, want 2/9", ratio)
	}
	// 1.05s on: the first slot (10 admitted, 1 shed) has left; none
	// served remains.
	if ratio, perSec := w.Shed(t0.Add(1050 * time.Millisecond)); !math.IsInf(ratio, 1) || perSec != 2 {
		t.Fatalf("ratio %v, per second %v; want +Inf, 2", ratio, perSec)
	}
	// Long after, empty again; the past counts in the newest slot.
	w.Admit(t0.Add(time.Hour))
	if ratio, _ := w.Shed(t0); ratio != 1 {
		t.Fatalf("ratio %v, want 1", ratio)
	}
}

func TestPushback(t *testing.T) {
	for _, tc := range []struct {
		share, retryShare, perSecond float64
		latency                      time.Duration
		limit                        int
		u                            float64
		delay                        time.Duration
		stop                         bool
	}{
		{0.11, 0.1, 1, time.Second, 10, 0.5, 0, true},
		{0.1, 0.1, 0, 100 * time.Millisecond, 10, 0.5, 100 * time.Millisecond, false},
		// 100ms + 100/s × (100ms)² / 10 = 200ms, spread by u.
		{0.05, 0.1, 100, 100 * time.Millisecond, 10, 0, 100 * time.Millisecond, false},
		{0.05, 0.1, 100, 100 * time.Millisecond, 10, 0.5, 200 * time.Millisecond, false},
		{0.05, 0.1, 0, 0, 10, 0.5, time.Millisecond, false},                              // floor
		{0.05, 0.1, 1e9, time.Second, 1, 0.5, MaxDelay, false},                           // cap
		{0.05, 0.1, 100, 100 * time.Millisecond, 0, 0.5, 1100 * time.Millisecond, false}, // limit 0 counts as 1
		{0, 0, 0, time.Second, 1, 0.5, time.Second, false},
		{math.Inf(1), 0.5, 0, time.Second, 1, 0.5, 0, true},
	} {
		d, stop := Pushback(tc.share, tc.retryShare, tc.perSecond, tc.latency, tc.limit, tc.u)
		if stop != tc.stop || (d-tc.delay).Abs() > time.Microsecond {
			t.Errorf("Pushback(%+v) = %v, %v; want %v, %v", tc, d, stop, tc.delay, tc.stop)
		}
	}
}
