package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
)

type demoConfig struct {
	failRate    float64
	calls       int
	maxAttempts int
	backoff     time.Duration
	seed        uint64
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c demoConfig
	fs.Float64Var(&c.failRate, "fail-rate", 0.3, "fraction of attempts the flaky service fails, in [0, 1]")
	fs.IntVar(&c.calls, "calls", 200, "calls made in the outage scenario")
	fs.IntVar(&c.maxAttempts, "max-attempts", 4, "maximum attempts per call")
	fs.DurationVar(&c.backoff, "backoff", 2*time.Millisecond, "initial backoff")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the flaky service")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "demo: unexpected argument %q\n", fs.Arg(0))
		return 2
	case !(c.failRate >= 0 && c.failRate <= 1):
		fmt.Fprintf(stderr, "demo: -fail-rate must be in [0, 1], got %v\n", c.failRate)
		return 2
	case c.calls < 1 || c.calls > 1_000_000:
		fmt.Fprintf(stderr, "demo: -calls must be in [1, 1000000], got %d\n", c.calls)
		return 2
	case c.maxAttempts < 1:
		fmt.Fprintf(stderr, "demo: -max-attempts must be >= 1, got %d\n", c.maxAttempts)
		return 2
	case c.backoff <= 0 || c.backoff > time.Second:
		fmt.Fprintf(stderr, "demo: -backoff must be in (0, 1s], got %v\n", c.backoff)
		return 2
	}
	if err := demo(ctx, stdout, c); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

var errUnavailable = errors.New("unavailable")

// flaky is an in-process service that fails a fraction of attempts.
type flaky struct {
	mu       sync.Mutex
	rng      *rand.Rand
	failRate float64
	down     bool
	attempts int
}

func (f *flaky) call(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.down || f.rng.Float64() < f.failRate {
		return rebound.Retryable(errUnavailable)
	}
	return nil
}

func demo(ctx context.Context, w io.Writer, c demoConfig) error {
	backoff := rebound.Backoff{Initial: c.backoff, Max: 8 * c.backoff, Multiplier: 2}
	policy, err := rebound.NewPolicy(rebound.RetryPolicy{MaxAttempts: c.maxAttempts, Backoff: backoff})
	if err != nil {
		return err
	}
	svc := &flaky{rng: rand.New(rand.NewPCG(c.seed, 0)), failRate: c.failRate}

	fmt.Fprintf(w, "A6 retry policy: %d attempts, backoff random(0, min(%v*2^(n-1), %v)), service fails %.0f%% of attempts\n\n",
		c.maxAttempts, backoff.Initial, backoff.Max, 100*c.failRate)
	for i := 1; i <= 5; i++ {
		if err := traceCall(ctx, w, fmt.Sprintf("call %d", i), policy, svc.call); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "\nServer pushback \"don't retry\" stops at once:")
	stop := func(context.Context) error {
		return rebound.Mark(errUnavailable, rebound.RetryInfo{Safety: rebound.SafetyYes, ServerStop: true})
	}
	if err := traceCall(ctx, w, "pushback", policy, stop); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nA deadline shorter than the next backoff ends the call without sleeping:")
	short, cancel := context.WithTimeout(ctx, c.backoff/2)
	defer cancel()
	long, err := rebound.NewPolicy(rebound.RetryPolicy{MaxAttempts: c.maxAttempts, Backoff: rebound.Backoff{Initial: time.Hour, Max: time.Hour, Multiplier: 1}}, rebound.WithRandom(half{}))
	if err != nil {
		return err
	}
	if err := traceCall(short, w, "deadline", long, func(context.Context) error { return rebound.Retryable(errUnavailable) }); err != nil {
		return err
	}

	return outage(ctx, w, c, svc)
}

type half struct{}

func (half) Float64() float64 { return 0.5 }

// traceCall runs one call and prints its attempts, the waits between them and
// why it stopped.
func traceCall(ctx context.Context, w io.Writer, name string, s rebound.Strategy, op func(context.Context) error) error {
	start := time.Now()
	var steps []string
	err := rebound.Do(ctx, s, func(ctx context.Context) error {
		err := op(ctx)
		res := "ok"
		if err != nil {
			res = err.Error()
		}
		steps = append(steps, fmt.Sprintf("#%d @%s %s", len(steps)+1, ms(time.Since(start)), res))
		return err
	})
	outcome := "succeeded"
	if err != nil {
		var re *rebound.Error
		if !errors.As(err, &re) {
			return err
		}
		outcome = "failed: " + strings.TrimPrefix(re.Reason.Error(), "rebound: ")
	}
	fmt.Fprintf(w, "  %-9s %-42s %s\n", name, outcome, strings.Join(steps, ", "))
	return nil
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// outage runs the same calls against a service that is down, with and
// without a retry throttle, and compares the load they put on it.
func outage(ctx context.Context, w io.Writer, c demoConfig, svc *flaky) error {
	fmt.Fprintf(w, "\nOutage: the service fails every attempt; %d calls, each allowed %d attempts.\n", c.calls, c.maxAttempts)
	fmt.Fprintf(w, "  %-32s %8s %10s %s\n", "policy", "attempts", "per call", "why calls stopped")
	zero := rebound.Backoff{Initial: time.Nanosecond, Max: time.Nanosecond, Multiplier: 1}
	for _, tc := range []struct {
		name   string
		budget func() (rebound.Budget, error)
	}{
		{"no retries", nil},
		{"retries", func() (rebound.Budget, error) { return nil, nil }},
		{"retries + A6 throttle (10, 0.1)", func() (rebound.Budget, error) {
			return rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 0.1})
		}},
		{"retries + token bucket (500/5)", func() (rebound.Budget, error) {
			return rebound.NewTokenBucket(rebound.DefaultTokenBucket)
		}},
	} {
		attempts := c.maxAttempts
		var budget rebound.Budget
		if tc.budget == nil {
			attempts = 1
		} else {
			b, err := tc.budget()
			if err != nil {
				return err
			}
			budget = b
		}
		p, err := rebound.NewPolicy(rebound.RetryPolicy{MaxAttempts: attempts, Backoff: zero}, rebound.WithBudget(budget))
		if err != nil {
			return err
		}
		svc.mu.Lock()
		svc.down, svc.attempts = true, 0
		svc.mu.Unlock()
		reasons := map[string]int{}
		for range c.calls {
			err := rebound.Do(ctx, p, svc.call)
			var re *rebound.Error
			if !errors.As(err, &re) {
				return fmt.Errorf("outage call: %v", err)
			}
			reasons[strings.TrimPrefix(re.Reason.Error(), "rebound: ")]++
		}
		svc.mu.Lock()
		n := svc.attempts
		svc.mu.Unlock()
		fmt.Fprintf(w, "  %-32s %8d %9.2fx %s\n", tc.name, n, float64(n)/float64(c.calls), formatCounts(reasons))
	}
	return nil
}

func formatCounts(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s: %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
