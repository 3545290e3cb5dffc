package shedrule

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestWindow(t *testing.T) {
	w := NewWindow(time.Second)
	for range 9 {
		w.Admit(t0)
	}
	if share, perSec := w.Shed(t0); share != 0.1 || perSec != 1 {
		t.Fatalf("share %v, per second %v; want 0.1, 1", share, perSec)
	}
	// Half a second on: all still in the window.
	if share, _ := w.Shed(t0.Add(500 * time.Millisecond)); math.Abs(share-2.0/11) > 1e-12 {
		t.Fatalf("share %v, want 2/11", share)
	}
	// 1.05s on: the first slot (9 admitted, 1 shed) has left.
	if share, perSec := w.Shed(t0.Add(1050 * time.Millisecond)); share != 1 || perSec != 2 {
		t.Fatalf("share %v, per second %v; want 1, 2", share, perSec)
	}
	// Long after, empty again; the past counts in the newest slot.
	w.Admit(t0.Add(time.Hour))
	if share, _ := w.Shed(t0); share != 0.5 {
		t.Fatalf("share %v, want 0.5", share)
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
	} {
		d, stop := Pushback(tc.share, tc.retryShare, tc.perSecond, tc.latency, tc.limit, tc.u)
		if stop != tc.stop || (d-tc.delay).Abs() > time.Microsecond {
			t.Errorf("Pushback(%+v) = %v, %v; want %v, %v", tc, d, stop, tc.delay, tc.stop)
		}
	}
}
