package rebound_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

var (
	errFlaky = errors.New("flaky")
	errBad   = errors.New("bad request")
)

// script returns an operation that returns errs in order, then nil, and a
// pointer to the number of calls made.
func script(errs ...error) (func(context.Context) error, *int) {
	calls := new(int)
	return func(context.Context) error {
		*calls++
		if *calls <= len(errs) {
			return errs[*calls-1]
		}
		return nil
	}, calls
}

var testBackoff = rebound.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}

func newPolicy(t *testing.T, maxAttempts int, opts ...rebound.Option) (*rebound.Retrier, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.NewAuto()
	opts = append([]rebound.Option{rebound.WithClock(clk), rebound.WithRandom(clocktest.NewRand(0.5))}, opts...)
	p, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: maxAttempts, Backoff: testBackoff}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p, clk
}

func retryable(err error) error { return rebound.Retryable(err) }

func pushback(d time.Duration) error {
	return rebound.Mark(errFlaky, rebound.RetryInfo{Safety: rebound.SafetyYes, HasRetryAfter: true, RetryAfter: d})
}

func TestDoPolicyRules(t *testing.T) {
	ms := time.Millisecond
	stop := rebound.Mark(errFlaky, rebound.RetryInfo{Safety: rebound.SafetyYes, ServerStop: true})
	for _, tc := range []struct {
		name     string
		max      int
		errs     []error
		calls    int
		reason   error // nil: success
		sleeps   []time.Duration
		attempts int
	}{
		{name: "first attempt succeeds", max: 3, calls: 1},
		{name: "retry then success", max: 3, errs: []error{retryable(errFlaky)}, calls: 2, sleeps: []time.Duration{50 * ms}},
		{name: "attempts exhausted", max: 3, errs: []error{retryable(errFlaky), retryable(errFlaky), retryable(errFlaky)},
			calls: 3, reason: rebound.ErrAttemptsExhausted, sleeps: []time.Duration{50 * ms, 100 * ms}, attempts: 3},
		{name: "exponent grows to the cap", max: 6, errs: []error{retryable(errFlaky), retryable(errFlaky), retryable(errFlaky), retryable(errFlaky), retryable(errFlaky)},
			calls: 6, sleeps: []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 500 * ms}},
		{name: "not retryable", max: 3, errs: []error{errBad}, calls: 1, reason: rebound.ErrNotRetryable, attempts: 1},
		{name: "maybe is not enough for A6", max: 3, errs: []error{rebound.Mark(errFlaky, rebound.RetryInfo{Safety: rebound.SafetyMaybe})},
			calls: 1, reason: rebound.ErrNotRetryable, attempts: 1},
		{name: "permanent", max: 3, errs: []error{rebound.Permanent(errFlaky)}, calls: 1, reason: rebound.ErrNotRetryable, attempts: 1},
		{name: "pushback stop", max: 3, errs: []error{stop}, calls: 1, reason: rebound.ErrPushback, attempts: 1},
		{name: "pushback exact delay resets exponent", max: 5,
			errs:  []error{retryable(errFlaky), retryable(errFlaky), pushback(777 * ms), retryable(errFlaky)},
			calls: 5, sleeps: []time.Duration{50 * ms, 100 * ms, 777 * ms, 50 * ms}},
		{name: "committed", max: 3, errs: []error{rebound.Mark(errFlaky, rebound.RetryInfo{Safety: rebound.SafetyYes, Committed: true})},
			calls: 1, reason: rebound.ErrCommitted, attempts: 1},
		{name: "pushback zero retries at once", max: 2, errs: []error{pushback(0)}, calls: 2},
		{name: "pushback ignored when attempts are exhausted", max: 2, errs: []error{retryable(errFlaky), pushback(ms)},
			calls: 2, reason: rebound.ErrAttemptsExhausted, sleeps: []time.Duration{50 * ms}, attempts: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, clk := newPolicy(t, tc.max)
			op, calls := script(tc.errs...)
			err := rebound.Do(context.Background(), p, op)
			if *calls != tc.calls {
				t.Errorf("calls = %d, want %d", *calls, tc.calls)
			}
			if got := clk.Sleeps(); !slices.Equal(got, tc.sleeps) {
				t.Errorf("sleeps = %v, want %v", got, tc.sleeps)
			}
			if tc.reason == nil {
				if err != nil {
					t.Fatalf("Do = %v, want success", err)
				}
				return
			}
			var re *rebound.Error
			if !errors.As(err, &re) {
				t.Fatalf("Do = %v, want *rebound.Error", err)
			}
			if !errors.Is(err, tc.reason) || !errors.Is(err, tc.errs[len(tc.errs)-1]) {
				t.Errorf("Do = %v, want it to wrap %v and the last attempt's error", err, tc.reason)
			}
			if re.Attempts != tc.attempts {
				t.Errorf("Attempts = %d, want %d", re.Attempts, tc.attempts)
			}
		})
	}
}

func TestDoThrottleCountsFirst(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 4, TokenRatio: 1})
	p, _ := newPolicy(t, 5, rebound.WithBudget(th))
	// 4 → 3 (retry), 3 → 2 (2 <= threshold 2: refused).
	op, calls := script(retryable(errFlaky), retryable(errFlaky), retryable(errFlaky))
	err := rebound.Do(context.Background(), p, op)
	if !errors.Is(err, rebound.ErrThrottled) || *calls != 2 {
		t.Fatalf("Do = %v after %d calls, want ErrThrottled after 2", err, *calls)
	}
	if th.Tokens() != 2000 {
		t.Fatalf("tokens = %d, want 2000", th.Tokens())
	}
	// A non-retryable failure does not count; a pushback stop does.
	_ = rebound.Do(context.Background(), p, func(context.Context) error { return errBad })
	if th.Tokens() != 2000 {
		t.Fatalf("non-retryable failure changed tokens to %d", th.Tokens())
	}
	_ = rebound.Do(context.Background(), p, func(context.Context) error {
		return rebound.Mark(errBad, rebound.RetryInfo{ServerStop: true})
	})
	if th.Tokens() != 1000 {
		t.Fatalf("pushback stop: tokens = %d, want 1000", th.Tokens())
	}
	for range 3 {
		if err := rebound.Do(context.Background(), p, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if th.Tokens() != 4000 {
		t.Fatalf("three successes: tokens = %d, want 4000", th.Tokens())
	}
}

func TestDoStandard(t *testing.T) {
	clk := clocktest.NewAuto()
	bucket, _ := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 20, RetryCost: 5, TimeoutCost: 10, SuccessRefund: 1})
	s, err := rebound.NewStandard(rebound.WithClock(clk), rebound.WithRandom(clocktest.NewRand(0.5)), rebound.WithBudget(bucket))
	if err != nil {
		t.Fatal(err)
	}
	timeout := rebound.Mark(errFlaky, rebound.RetryInfo{Safety: rebound.SafetyMaybe, Timeout: true})
	// Retry-after is a minimum: 3s beats the 1s backoff (0.5 of 2s), 10ms
	// does not beat 0.5s.
	op, calls := script(timeout, rebound.RetryAfter(errFlaky, 3*time.Second), rebound.RetryAfter(errFlaky, 10*time.Millisecond))
	if err := rebound.Do(context.Background(), s, op); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{500 * time.Millisecond, 3 * time.Second, 2 * time.Second}; !slices.Equal(clk.Sleeps(), want) || *calls != 4 {
		t.Fatalf("sleeps = %v calls = %d, want %v and 4", clk.Sleeps(), *calls, want)
	}
	if bucket.Tokens() != 1 { // 20 - 10 (timeout) - 5 - 5 + 1
		t.Fatalf("bucket = %d, want 1", bucket.Tokens())
	}
	op, calls = script(retryable(errFlaky))
	if err := rebound.Do(context.Background(), s, op); !errors.Is(err, rebound.ErrThrottled) || *calls != 1 {
		t.Fatalf("Do = %v after %d calls, want ErrThrottled after 1", err, *calls)
	}
	// Unmarked errors: client-fault and plain errors are not retried, a
	// server-fault error is.
	op, calls = script(errBad)
	if err := rebound.Do(context.Background(), s, op); !errors.Is(err, rebound.ErrNotRetryable) || *calls != 1 {
		t.Fatalf("plain error: Do = %v after %d calls", err, *calls)
	}
}

type serverFault struct{}

func (serverFault) Error() string        { return "server fault" }
func (serverFault) Fault() rebound.Fault { return rebound.FaultServer }

func TestStandardRetriesServerFault(t *testing.T) {
	s, _ := rebound.NewStandard(rebound.WithClock(clocktest.NewAuto()), rebound.WithMaxAttempts(2))
	op, calls := script(serverFault{}, serverFault{})
	err := rebound.Do(context.Background(), s, op)
	if !errors.Is(err, rebound.ErrAttemptsExhausted) || *calls != 2 {
		t.Fatalf("Do = %v after %d calls, want ErrAttemptsExhausted after 2", err, *calls)
	}
}

func TestDoDeadlineWouldPass(t *testing.T) {
	p, clk := newPolicy(t, 5)
	// An hour ahead of the real clock, so that the deadline is 120ms away
	// for Do and an hour away for a busy machine (see clocktest.NewAhead).
	clk.Advance(time.Hour)
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(120*time.Millisecond))
	defer cancel()
	// Sleeps 50ms, then the next 100ms would end at 150ms > 120ms.
	op, calls := script(retryable(errFlaky), retryable(errFlaky), retryable(errFlaky))
	err := rebound.Do(ctx, p, op)
	if !errors.Is(err, rebound.ErrDeadline) || *calls != 2 {
		t.Fatalf("Do = %v after %d calls, want ErrDeadline after 2", err, *calls)
	}
	if got := clk.Sleeps(); !slices.Equal(got, []time.Duration{50 * time.Millisecond}) {
		t.Fatalf("slept %v, want only 50ms", got)
	}
}

func TestDoCancelledDuringWait(t *testing.T) {
	clk := clocktest.New()
	p, _ := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 3, Backoff: testBackoff}, rebound.WithClock(clk))
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("user gave up")
	done := make(chan error)
	go func() { done <- rebound.Do(ctx, p, func(context.Context) error { return retryable(errFlaky) }) }()
	if !clk.WaitPending(1) {
		t.Fatal("Do never waited")
	}
	cancel(cause)
	err := <-done
	if !errors.Is(err, cause) || !errors.Is(err, errFlaky) {
		t.Fatalf("Do = %v, want the cause joined with the attempt's error", err)
	}
	if clk.Pending() != 0 {
		t.Fatal("the wait's timer was not stopped")
	}
}

func TestDoCallerCancellationNotRetried(t *testing.T) {
	p, _ := newPolicy(t, 5)
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := rebound.Do(ctx, p, func(ctx context.Context) error {
		calls++
		cancel()
		return retryable(ctx.Err())
	})
	if calls != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v after %d calls, want context.Canceled after 1", err, calls)
	}
}

// delayed is a strategy whose initial token has a delay and whose initial
// token can be made to fail.
type delayed struct {
	rebound.Strategy
	fail  bool
	clock rebound.Clock
}

type delayedToken struct{ rebound.Token }

func (d delayedToken) Delay() time.Duration { return time.Second }

func (d *delayed) AcquireInitialToken(ctx context.Context) (rebound.Token, error) {
	if d.fail {
		return nil, errors.New("no token")
	}
	t, err := d.Strategy.AcquireInitialToken(ctx)
	return delayedToken{t}, err
}

func (d *delayed) Clock() rebound.Clock { return d.clock }

func TestDoInitialToken(t *testing.T) {
	p, clk := newPolicy(t, 3)
	d := &delayed{Strategy: p, clock: clk}
	calls := 0
	// The wrapped token is foreign to p, so the first failure ends the loop:
	// this also checks that foreign tokens are refused.
	err := rebound.Do(context.Background(), d, func(context.Context) error { calls++; return retryable(errFlaky) })
	if !slices.Equal(clk.Sleeps(), []time.Duration{time.Second}) {
		t.Fatalf("initial delay: slept %v, want [1s]", clk.Sleeps())
	}
	if !errors.Is(err, rebound.ErrInvalidToken) || calls != 1 {
		t.Fatalf("Do = %v after %d calls, want errInvalidToken after 1", err, calls)
	}
	d.fail = true
	calls = 0
	err = rebound.Do(context.Background(), d, func(context.Context) error { calls++; return errFlaky })
	if err != errFlaky || calls != 1 {
		t.Fatalf("without an initial token Do = %v after %d calls, want the bare error after 1", err, calls)
	}
}

func TestTokenReuseRefused(t *testing.T) {
	p, _ := newPolicy(t, 3)
	s, _ := rebound.NewStandard()
	ctx := context.Background()
	tok, _ := p.AcquireInitialToken(ctx)
	if _, err := s.RefreshToken(ctx, tok, retryable(errFlaky)); !errors.Is(err, rebound.ErrInvalidToken) {
		t.Fatalf("foreign refresh = %v", err)
	}
	if err := s.RecordSuccess(tok); !errors.Is(err, rebound.ErrInvalidToken) {
		t.Fatalf("foreign success = %v", err)
	}
	next, err := p.RefreshToken(ctx, tok, retryable(errFlaky))
	if err != nil || next.Attempt() != 2 {
		t.Fatalf("refresh = %v, %v", next, err)
	}
	if _, err := p.RefreshToken(ctx, tok, retryable(errFlaky)); !errors.Is(err, rebound.ErrInvalidToken) {
		t.Fatalf("second refresh of a used token = %v", err)
	}
	if err := p.RecordSuccess(tok); !errors.Is(err, rebound.ErrInvalidToken) {
		t.Fatalf("success with a used token = %v", err)
	}
	if err := p.RecordSuccess(next); err != nil {
		t.Fatal(err)
	}
	if err := p.RecordSuccess(next); !errors.Is(err, rebound.ErrInvalidToken) {
		t.Fatalf("second success = %v", err)
	}
	if _, err := p.RefreshToken(ctx, nil, errFlaky); !errors.Is(err, rebound.ErrInvalidToken) {
		t.Fatalf("nil token = %v", err)
	}
}

func TestDoValue(t *testing.T) {
	p, _ := newPolicy(t, 3)
	n := 0
	v, err := rebound.DoValue(context.Background(), p, func(context.Context) (int, error) {
		n++
		if n < 2 {
			return -1, retryable(errFlaky)
		}
		return 42, nil
	})
	if v != 42 || err != nil {
		t.Fatalf("DoValue = %d, %v", v, err)
	}
	v, err = rebound.DoValue(context.Background(), p, func(context.Context) (int, error) { return 7, errBad })
	if v != 0 || !errors.Is(err, errBad) {
		t.Fatalf("failed DoValue = %d, %v, want the zero value", v, err)
	}
}

func TestBadInput(t *testing.T) {
	if err := rebound.Do(context.Background(), nil, func(context.Context) error { t.Fatal("op called"); return nil }); err == nil {
		t.Error("nil strategy: no error")
	}
	p, _ := newPolicy(t, 2)
	if err := rebound.Do(context.Background(), p, nil); err == nil {
		t.Error("nil op: no error")
	}
	for name, f := range map[string]func() error{
		"maxAttempts 0": func() error {
			_, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 0, Backoff: testBackoff})
			return err
		},
		"negative backoff": func() error {
			_, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 2, Backoff: rebound.Backoff{Initial: -1, Max: 1, Multiplier: 2}})
			return err
		},
		"standard maxAttempts -1": func() error { _, err := rebound.NewStandard(rebound.WithMaxAttempts(-1)); return err },
		"nil option":              func() error { _, err := rebound.NewStandard(nil); return err },
		"negative hedge delay": func() error {
			_, err := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 2, HedgingDelay: -time.Second})
			return err
		},
		"hedge maxAttempts 0": func() error { _, err := rebound.NewHedger(rebound.HedgingPolicy{}); return err },
	} {
		if err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	p, _ := newPolicy(t, 2)
	err := rebound.Do(context.Background(), p, func(context.Context) error { return retryable(errFlaky) })
	if got, want := err.Error(), "rebound: gave up after 2 attempts (attempts exhausted): flaky"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

// countingPolicy embeds a built-in strategy and overrides
// AcquireInitialToken; Do must call it.
type countingPolicy struct {
	*rebound.Retrier
	acquired int
}

func (c *countingPolicy) AcquireInitialToken(ctx context.Context) (rebound.Token, error) {
	c.acquired++
	return c.Retrier.AcquireInitialToken(ctx)
}

func TestDoCallsOverriddenInitialToken(t *testing.T) {
	p, _ := newPolicy(t, 2)
	c := &countingPolicy{Retrier: p}
	if err := rebound.Do(context.Background(), c, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if c.acquired != 1 {
		t.Fatalf("AcquireInitialToken called %d times, want 1", c.acquired)
	}
}

// A call that a built-in strategy retries once allocates nothing in the
// loop: the first attempt runs before any token is made, and the retry's
// token lives on DoValue's stack.
func TestDoRetryAllocatesNothing(t *testing.T) {
	retrier, standard := builtinStrategies(t)
	fail := rebound.Retryable(errFlaky)
	for _, s := range []rebound.Strategy{retrier, standard} {
		n := 0
		op := func(context.Context) error {
			if n++; n%2 == 1 {
				return fail
			}
			return nil
		}
		allocs := testing.AllocsPerRun(100, func() {
			if err := rebound.Do(context.Background(), s, op); err != nil {
				t.Fatal(err)
			}
		})
		if n != 202 || allocs != 0 {
			t.Errorf("%T: %d attempts for 101 calls (want 202), %v allocations a call (want 0)", s, n, allocs)
		}
	}
}

// countingBudget counts what the loop tells a budget; with calls set it is
// a CallBudget too.
type countingBudget struct {
	successes, failures, starts, ends, retriesEnded int
}

func (b *countingBudget) Allow(bool) bool { return true }
func (b *countingBudget) RecordSuccess()  { b.successes++ }
func (b *countingBudget) RecordFailure()  { b.failures++ }

type countingCallBudget struct{ countingBudget }

func (b *countingCallBudget) StartCall() { b.starts++ }
func (b *countingCallBudget) EndCall()   { b.ends++ }
func (b *countingCallBudget) EndRetry()  { b.retriesEnded++ }

// TestDoTellsBudgets: whichever path a call takes (a built-in strategy's
// first attempt before any token, with a budget that counts calls or one
// that does not; Do, DoValue or Call.Retry), a success at once is one
// RecordSuccess, a call budget hears of the call once, and a retried call
// tells it of its one retry.
func TestDoTellsBudgets(t *testing.T) {
	runs := map[string]func(rebound.Strategy, func(context.Context) error) error{
		"Do": func(s rebound.Strategy, op func(context.Context) error) error {
			return rebound.Do(context.Background(), s, op)
		},
		"DoValue": func(s rebound.Strategy, op func(context.Context) error) error {
			_, err := rebound.DoValue(context.Background(), s, func(ctx context.Context) (int, error) { return 1, op(ctx) })
			return err
		},
		"Call.Retry": func(s rebound.Strategy, op func(context.Context) error) error {
			var c rebound.Call[int]
			_, err := c.Retry(context.Background(), s, func(ctx context.Context) (int, error) { return 1, op(ctx) })
			return err
		},
	}
	backoff := rebound.Backoff{Initial: 1, Max: 1, Multiplier: 1}
	for name, run := range runs {
		for _, counts := range []bool{false, true} {
			for _, standard := range []bool{false, true} {
				var b rebound.Budget
				plain, calls := &countingBudget{}, &countingCallBudget{}
				if counts {
					b = calls
				} else {
					b = plain
				}
				var s rebound.Strategy
				var err error
				if standard {
					s, err = rebound.NewStandard(rebound.WithBackoff(backoff), rebound.WithBudget(b))
				} else {
					s, err = rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 3, Backoff: backoff}, rebound.WithBudget(b))
				}
				if err != nil {
					t.Fatal(err)
				}
				ok, _ := script()
				flaky, _ := script(retryable(errFlaky))
				if err := run(s, ok); err != nil {
					t.Fatal(err)
				}
				if err := run(s, flaky); err != nil {
					t.Fatal(err)
				}
				got := *plain
				if counts {
					got = calls.countingBudget
				}
				want := countingBudget{successes: 2, failures: 1}
				if counts {
					want.starts, want.ends, want.retriesEnded = 2, 2, 1
				}
				if got != want {
					t.Errorf("%s, call budget %v, %T: budget heard %+v, want %+v", name, counts, s, got, want)
				}
			}
		}
	}
}
