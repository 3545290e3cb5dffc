package verdict

import (
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

func TestReclassify(t *testing.T) {
	yes, no := rebound.RetryInfo{Safety: rebound.SafetyYes}, rebound.RetryInfo{}
	hard := rebound.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 3}
	for _, tc := range []struct {
		name             string
		builtin, verdict rebound.RetryInfo
		promotable       bool
		want             rebound.RetryInfo
	}{
		{"demote", yes, no, false, no},
		{"promote with a policy", no, yes, true, yes},
		{"no promotion without", no, yes, false, no},
		{"no maybe without", no, rebound.RetryInfo{Safety: rebound.SafetyMaybe}, false, no},
		{"commit stays", rebound.RetryInfo{Safety: rebound.SafetyYes, Committed: true}, yes, true, rebound.RetryInfo{Safety: rebound.SafetyYes, Committed: true}},
		{"stop stays", rebound.RetryInfo{ServerStop: true}, yes, true, rebound.RetryInfo{Safety: rebound.SafetyYes, ServerStop: true}},
		{"pushback stays", rebound.RetryInfo{Safety: rebound.SafetyYes, HasRetryAfter: true, RetryAfter: time.Second},
			rebound.RetryInfo{Safety: rebound.SafetyYes, HasRetryAfter: true, RetryAfter: time.Millisecond},
			true, rebound.RetryInfo{Safety: rebound.SafetyYes, HasRetryAfter: true, RetryAfter: time.Second}},
		{"min delay only lengthens", rebound.RetryInfo{Safety: rebound.SafetyYes, MinDelay: time.Second}, yes, true,
			rebound.RetryInfo{Safety: rebound.SafetyYes, MinDelay: time.Second}},
		{"cap stop stays", rebound.RetryInfo{Safety: rebound.SafetyYes, Stop: rebound.ErrRetryDelayTooLong}, yes, true,
			rebound.RetryInfo{Safety: rebound.SafetyYes, Stop: rebound.ErrRetryDelayTooLong}},
		{"throttle with backoff", yes, rebound.RetryInfo{Safety: rebound.SafetyYes, SlowDown: true, Backoff: hard}, false,
			rebound.RetryInfo{Safety: rebound.SafetyYes, SlowDown: true, Backoff: hard}},
		{"bad backoff dropped", yes, rebound.RetryInfo{Safety: rebound.SafetyYes, Backoff: rebound.Backoff{Initial: time.Second}}, false, yes},
		{"local and class", yes, rebound.RetryInfo{Safety: rebound.SafetyYes, Local: true, Class: "c", ClassAttempts: -2}, false,
			rebound.RetryInfo{Safety: rebound.SafetyYes, Local: true, Class: "c"}},
	} {
		if got := Reclassify(tc.builtin, tc.promotable, tc.verdict); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
