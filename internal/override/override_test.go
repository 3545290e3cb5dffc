package override

import (
	"slices"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

func TestApply(t *testing.T) {
	cfg := Policy{Present: true, MaxAttempts: 4, Timeout: time.Second}
	has := func(c int) bool { return c == 14 || c == 8 }
	for _, tc := range []struct {
		name    string
		p       Policy
		o       rebound.Override
		trusted bool
		want    Result
	}{
		{"zero", cfg, rebound.Override{}, false, Result{Policy: cfg}},
		{"fewer attempts", cfg, rebound.Override{MaxAttempts: 2}, false, Result{Policy: Policy{true, 2, time.Second}}},
		{"more attempts clamped", cfg, rebound.Override{MaxAttempts: 5}, false, Result{Policy: cfg, Clamped: []string{"MaxAttempts"}}},
		{"more attempts trusted", cfg, rebound.Override{MaxAttempts: 5}, true, Result{Policy: Policy{true, 5, time.Second}}},
		{"client cap holds", cfg, rebound.Override{MaxAttempts: 9}, true, Result{Policy: Policy{true, 6, time.Second}}},
		{"shorter timeout", cfg, rebound.Override{PerAttemptTimeout: time.Millisecond}, false, Result{Policy: Policy{true, 4, time.Millisecond}}},
		{"longer timeout clamped", cfg, rebound.Override{PerAttemptTimeout: time.Hour}, false, Result{Policy: cfg, Clamped: []string{"PerAttemptTimeout"}}},
		{"same timeout", cfg, rebound.Override{PerAttemptTimeout: time.Second}, false, Result{Policy: cfg}},
		{"longer timeout trusted", cfg, rebound.Override{PerAttemptTimeout: time.Hour}, true, Result{Policy: Policy{true, 4, time.Hour}}},
		{"timeout where none", Policy{true, 4, 0}, rebound.Override{PerAttemptTimeout: time.Millisecond}, false, Result{Policy: Policy{true, 4, time.Millisecond}}},
		{"codes intersected", cfg, rebound.Override{RetryableCodes: []int{14, 2}}, false, Result{Policy: cfg, Codes: []int{14}, Clamped: []string{"RetryableCodes"}}},
		{"codes trusted", cfg, rebound.Override{RetryableCodes: []int{14, 2}}, true, Result{Policy: cfg, Codes: []int{14, 2}}},
		{"no codes", cfg, rebound.Override{RetryableCodes: []int{}}, false, Result{Policy: cfg, Codes: []int{}}},
		{"disable", cfg, rebound.Override{Disable: true, MaxAttempts: 3}, true, Result{Policy: Policy{true, 1, time.Second}}},
		{"no policy clamped", Policy{MaxAttempts: 1}, rebound.Override{MaxAttempts: 3}, false, Result{Policy: Policy{MaxAttempts: 1}, Clamped: []string{"policy"}}},
		{"no policy, fewer", Policy{MaxAttempts: 1}, rebound.Override{MaxAttempts: 1}, false, Result{Policy: Policy{MaxAttempts: 1}}},
		{"no policy trusted", Policy{MaxAttempts: 1}, rebound.Override{MaxAttempts: 3, RetryableCodes: []int{14}}, true,
			Result{Policy: Policy{true, 3, 0}, Codes: []int{14}, Created: true}},
		{"no policy trusted, cap", Policy{MaxAttempts: 1}, rebound.Override{PerAttemptTimeout: time.Second}, true,
			Result{Policy: Policy{true, 6, time.Second}, Codes: []int{}, Created: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Apply(tc.p, has, tc.o, tc.trusted, 6)
			if got.Policy != tc.want.Policy || got.Created != tc.want.Created ||
				!slices.Equal(got.Codes, tc.want.Codes) || (got.Codes == nil) != (tc.want.Codes == nil) ||
				!slices.Equal(got.Clamped, tc.want.Clamped) {
				t.Fatalf("Apply = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		o   rebound.Override
		err string
	}{
		{rebound.Override{}, ""},
		{rebound.Override{MaxAttempts: -1}, "Override.MaxAttempts must be >= 0, got -1"},
		{rebound.Override{PerAttemptTimeout: -time.Second}, "Override.PerAttemptTimeout must be >= 0, got -1s"},
	} {
		err := Validate(tc.o)
		if (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("Validate(%+v) = %v, want %q", tc.o, err, tc.err)
		}
	}
}
