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
