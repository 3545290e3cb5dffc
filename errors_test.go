package rebound_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/rebound-go/rebound"
)

// isDeadline is an error that says it is context.DeadlineExceeded through
// its Is method, as some libraries' timeout errors do.
type isDeadline struct{}

func (isDeadline) Error() string                { return "timed out" }
func (isDeadline) Is(target error) bool         { return target == context.DeadlineExceeded }
func (isDeadline) RetryInfo() rebound.RetryInfo { return rebound.RetryInfo{Safety: rebound.SafetyYes} }

// Classify never retries a context's error, wherever it sits in the
// error's tree, even under a mark that says retry.
func TestClassifyContextErrors(t *testing.T) {
	retry := rebound.RetryInfo{Safety: rebound.SafetyYes}
	cases := []struct {
		name string
		err  error
		want rebound.Safety
	}{
		{"canceled", context.Canceled, rebound.SafetyNo},
		{"deadline", context.DeadlineExceeded, rebound.SafetyNo},
		{"marked canceled", rebound.Mark(context.Canceled, retry), rebound.SafetyNo},
		{"wrapped deadline", fmt.Errorf("call: %w", rebound.Mark(context.DeadlineExceeded, retry)), rebound.SafetyNo},
		{"joined", rebound.Mark(errors.Join(errors.New("a"), fmt.Errorf("b: %w", context.Canceled)), retry), rebound.SafetyNo},
		{"two %w", rebound.Mark(fmt.Errorf("%w %w", errors.New("a"), context.DeadlineExceeded), retry), rebound.SafetyNo},
		{"Is method", isDeadline{}, rebound.SafetyNo},
		{"marked other", rebound.Mark(errors.New("busy"), retry), rebound.SafetyYes},
		{"joined other", rebound.Mark(errors.Join(errors.New("a"), errors.New("b")), retry), rebound.SafetyYes},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := rebound.Classify(c.err).Safety; got != c.want {
				t.Fatalf("Classify(%v).Safety = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

// An attempt rejected locally ends the call with ErrThrottled wherever the
// rejection sits in its error's tree, under both built-in strategies, and
// is made once.
func TestDoRejectedLocallyInTree(t *testing.T) {
	retrier, standard := builtinStrategies(t)
	retry := rebound.RetryInfo{Safety: rebound.SafetyYes}
	errs := map[string]error{
		"rate limited":       rebound.Mark(fmt.Errorf("send: %w", rebound.ErrRateLimited), retry),
		"joined":             rebound.Mark(errors.Join(errors.New("a"), rebound.ErrRejectedLocally), retry),
		"canceled, rejected": rebound.Mark(fmt.Errorf("%w; %w", context.Canceled, rebound.ErrRejectedLocally), retry),
	}
	for _, s := range []rebound.Strategy{retrier, standard} {
		for name, e := range errs {
			n := 0
			err := rebound.Do(context.Background(), s, func(context.Context) error { n++; return e })
			if n != 1 || !errors.Is(err, rebound.ErrThrottled) {
				t.Errorf("%T, %s: %d attempts, err %v; want 1 attempt, throttled", s, name, n, err)
			}
		}
	}
}

// builtinStrategies returns a Retrier and a Standard strategy that allow
// three attempts with next to no backoff.
func builtinStrategies(t *testing.T) (*rebound.Retrier, *rebound.Standard) {
	t.Helper()
	backoff := rebound.Backoff{Initial: 1, Max: 1, Multiplier: 1}
	retrier, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 3, Backoff: backoff})
	if err != nil {
		t.Fatal(err)
	}
	standard, err := rebound.NewStandard(rebound.WithBackoff(backoff))
	if err != nil {
		t.Fatal(err)
	}
	return retrier, standard
}
