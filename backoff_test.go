package rebound_test

import (
	"math"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

func TestBackoffCeiling(t *testing.T) {
	b := rebound.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}
	for _, tc := range []struct {
		retry int
		want  time.Duration
	}{
		{-3, 100 * time.Millisecond},
		{0, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, time.Second},
		{64, time.Second},
		{math.MaxInt, time.Second},
	} {
		if got := b.Ceiling(tc.retry); got != tc.want {
			t.Errorf("Ceiling(%d) = %v, want %v", tc.retry, got, tc.want)
		}
	}
	shrinking := rebound.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 0.5}
	if got := shrinking.Ceiling(3); got != 250*time.Millisecond {
		t.Errorf("multiplier 0.5: Ceiling(3) = %v, want 250ms", got)
	}
	// A6: min(initial*multiplier^(n-1), max) caps the first retry too when
	// max is below initial.
	capped := rebound.Backoff{Initial: 2 * time.Second, Max: 50 * time.Millisecond, Multiplier: 2}
	for retry := 1; retry <= 4; retry++ {
		if got := capped.Ceiling(retry); got != 50*time.Millisecond {
			t.Errorf("max below initial: Ceiling(%d) = %v, want 50ms", retry, got)
		}
	}
}

func TestBackoffDelayBounds(t *testing.T) {
	full := rebound.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}
	prop := full
	prop.Proportional = 0.2
	for retry := 1; retry <= 8; retry++ {
		c := full.Ceiling(retry)
		if got := full.Delay(retry, 0); got != 0 {
			t.Errorf("full jitter: Delay(%d, 0) = %v, want 0", retry, got)
		}
		if got := full.Delay(retry, 0.5); got != c/2 {
			t.Errorf("full jitter: Delay(%d, 0.5) = %v, want %v", retry, got, c/2)
		}
		if got := full.Delay(retry, 0.999999); got >= c || got < c*99/100 {
			t.Errorf("full jitter: Delay(%d, ~1) = %v, want just under %v", retry, got, c)
		}
		lo, hi := time.Duration(float64(c)*0.8), time.Duration(float64(c)*1.2)
		if got := prop.Delay(retry, 0); got != lo {
			t.Errorf("proportional: Delay(%d, 0) = %v, want %v", retry, got, lo)
		}
		if got := prop.Delay(retry, 0.5); got != c {
			t.Errorf("proportional: Delay(%d, 0.5) = %v, want %v", retry, got, c)
		}
		if got := prop.Delay(retry, 0.999999); got > hi || got < hi*99/100 {
			t.Errorf("proportional: Delay(%d, ~1) = %v, want just under %v", retry, got, hi)
		}
	}
}

func TestBackoffValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    rebound.Backoff
		ok   bool
	}{
		{"default", rebound.DefaultBackoff(), true},
		{"zero", rebound.Backoff{}, false},
		{"negative initial", rebound.Backoff{Initial: -1, Max: time.Second, Multiplier: 2}, false},
		{"max below initial", rebound.Backoff{Initial: time.Second, Max: time.Millisecond, Multiplier: 2}, true},
		{"zero max", rebound.Backoff{Initial: time.Second, Max: 0, Multiplier: 2}, false},
		{"zero multiplier", rebound.Backoff{Initial: 1, Max: 1, Multiplier: 0}, false},
		{"NaN multiplier", rebound.Backoff{Initial: 1, Max: 1, Multiplier: math.NaN()}, false},
		{"Inf multiplier", rebound.Backoff{Initial: 1, Max: 1, Multiplier: math.Inf(1)}, false},
		{"jitter above 1", rebound.Backoff{Initial: 1, Max: 1, Multiplier: 1, Proportional: 1.5}, false},
		{"negative jitter", rebound.Backoff{Initial: 1, Max: 1, Multiplier: 1, Proportional: -0.1}, false},
	} {
		err := tc.b.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
