package a6

import (
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

func TestRateFeedback(t *testing.T) {
	delay := func() time.Duration { return 3 * time.Second }
	for _, tc := range []struct {
		name     string
		code     uint32
		pushback []string
		want     rebound.RateFeedback
	}{
		{"ok", 0, nil, rebound.RateFeedback{}},
		{"unavailable", 14, nil, rebound.RateFeedback{}},
		{"resource exhausted: retry_delay", 8, nil, rebound.RateFeedback{SlowDown: true, Wait: 3 * time.Second}},
		{"pushback delay over retry_delay", 14, []string{"250"}, rebound.RateFeedback{SlowDown: true, Wait: 250 * time.Millisecond}},
		{"pushback stop: no wait", 8, []string{"-1"}, rebound.RateFeedback{SlowDown: true}},
	} {
		if got := RateFeedback(tc.code, tc.pushback, delay); got != tc.want {
			t.Errorf("%s: RateFeedback = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestSetLimitsValidate(t *testing.T) {
	o := NewOptions("pkg")
	o.SetAdaptiveThrottle(rebound.AdaptiveThrottleConfig{K: -1})
	if o.Err == nil || o.AdaptiveThrottle != nil {
		t.Fatalf("invalid throttle config: Err=%v, AdaptiveThrottle=%v", o.Err, o.AdaptiveThrottle)
	}
	o = NewOptions("pkg")
	o.SetRateLimit(rebound.AdaptiveRateLimitConfig{})
	o.SetAdaptiveThrottle(rebound.AdaptiveThrottleConfig{})
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	g, l := o.Gates("a6-limits-test", nil)
	if g == nil || g.Throttle == nil || l == nil || l.Limiter == nil {
		t.Fatalf("Gates = %+v, %+v, want both set", g, l)
	}
	if g2, l2 := o.Gates("a6-limits-test", nil); g2.Throttle != g.Throttle || l2.Limiter != l.Limiter {
		t.Fatal("gates of one name do not share their throttle and limiter")
	}
	off := NewOptions("pkg")
	if g, l := off.Gates("x", nil); g != nil || l != nil {
		t.Fatalf("options off: Gates = %v, %v, want nil, nil", g, l)
	}
}
