package rebound_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// hedgeRun drives Hedge with attempts the test finishes one by one.
type hedgeRun struct {
	t       *testing.T
	clk     *clocktest.Clock
	events  chan string
	outcome [8]chan error
	commit  [8]chan struct{} // attempt n calls rebound.Commit when told
	done    chan error
	value   int
}

func startHedge(t *testing.T, ctx context.Context, p rebound.HedgingPolicy, opts ...rebound.Option) *hedgeRun {
	t.Helper()
	r := &hedgeRun{t: t, clk: clocktest.New(), events: make(chan string, 64), done: make(chan error, 1)}
	for i := range r.outcome {
		r.outcome[i] = make(chan error, 1)
		r.commit[i] = make(chan struct{}, 1)
	}
	h, err := rebound.NewHedger(p, append([]rebound.Option{rebound.WithClock(r.clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		v, err := rebound.Hedge(ctx, h, func(ctx context.Context, n int) (int, error) {
			r.events <- fmt.Sprint("start ", n)
			for {
				select {
				case err := <-r.outcome[n]:
					return n, err
				case <-r.commit[n]:
					r.events <- fmt.Sprint("commit ", n, " ", rebound.Commit(ctx))
				case <-ctx.Done():
					r.events <- fmt.Sprint("cancel ", n)
					return 0, ctx.Err()
				}
			}
		})
		r.value = v
		r.done <- err
	}()
	return r
}

// expect reads the next events, in any order within the group.
func (r *hedgeRun) expect(want ...string) {
	r.t.Helper()
	var got []string
	for range want {
		select {
		case e := <-r.events:
			got = append(got, e)
		case <-time.After(10 * time.Second):
			r.t.Fatalf("events %v, still waiting for %v", got, want)
		}
	}
	slices.Sort(got)
	w := slices.Clone(want)
	slices.Sort(w)
	if !slices.Equal(got, w) {
		r.t.Fatalf("events %v, want %v", got, want)
	}
}

func (r *hedgeRun) quiet() {
	r.t.Helper()
	select {
	case e := <-r.events:
		r.t.Fatalf("unexpected event %q", e)
	default:
	}
}

// advance waits until Hedge has armed its timer, then moves the clock.
func (r *hedgeRun) advance(d time.Duration) {
	r.t.Helper()
	if !r.clk.WaitPending(1) {
		r.t.Fatal("Hedge armed no timer")
	}
	r.clk.Advance(d)
}

func (r *hedgeRun) result() error {
	r.t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(10 * time.Second):
		r.t.Fatal("Hedge did not return")
		return nil
	}
}

var hedgeDelay = 100 * time.Millisecond

func TestHedgeScheduleAndWinner(t *testing.T) {
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 4, HedgingDelay: hedgeDelay})
	r.expect("start 1")
	r.clk.WaitPending(1)
	r.clk.Advance(hedgeDelay - 1)
	r.quiet()
	r.clk.Advance(1)
	r.expect("start 2")
	r.advance(hedgeDelay)
	r.expect("start 3")
	r.outcome[2] <- nil
	r.expect("cancel 1", "cancel 3")
	if err := r.result(); err != nil || r.value != 2 {
		t.Fatalf("Hedge = %d, %v, want attempt 2's value", r.value, err)
	}
	if r.clk.Pending() != 0 {
		t.Fatal("a hedge timer outlived the call")
	}
}

func TestHedgeNonFatalSendsNextAtOnce(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 1})
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: hedgeDelay}, rebound.WithBudget(th))
	r.expect("start 1")
	r.clk.WaitPending(1)
	r.clk.Advance(30 * time.Millisecond)
	r.outcome[1] <- retryable(errFlaky)
	r.expect("start 2")
	// The next hedge is hedgingDelay after the shortcut, not after start.
	r.clk.WaitPending(1)
	r.clk.Advance(hedgeDelay - 30*time.Millisecond)
	r.quiet()
	r.clk.Advance(30 * time.Millisecond)
	r.expect("start 3")
	r.outcome[2] <- retryable(errFlaky)
	r.outcome[3] <- retryable(errFlaky)
	err := r.result()
	var re *rebound.Error
	if !errors.As(err, &re) || !errors.Is(err, rebound.ErrAttemptsExhausted) || re.Attempts != 3 {
		t.Fatalf("Hedge = %v, want ErrAttemptsExhausted after 3 attempts", err)
	}
	if th.Tokens() != 7000 {
		t.Fatalf("three non-fatal failures: tokens = %d, want 7000", th.Tokens())
	}
}

func TestHedgeFatalCancelsAll(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 1})
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: hedgeDelay}, rebound.WithBudget(th))
	r.expect("start 1")
	r.advance(hedgeDelay)
	r.expect("start 2")
	r.outcome[2] <- errBad
	r.expect("cancel 1")
	err := r.result()
	if !errors.Is(err, errBad) || !errors.Is(err, rebound.ErrNotRetryable) {
		t.Fatalf("Hedge = %v, want the fatal error", err)
	}
	if th.Tokens() != 10000 {
		t.Fatalf("a fatal failure changed the throttle to %d", th.Tokens())
	}
	r.quiet()
}

func TestHedgePushback(t *testing.T) {
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 4, HedgingDelay: hedgeDelay})
	r.expect("start 1")
	r.clk.WaitCreated(1)
	r.outcome[1] <- pushback(300 * time.Millisecond)
	// The pending hedge moves to 300ms from now; later ones at 300ms+delay.
	r.clk.WaitCreated(2)
	r.clk.Advance(299 * time.Millisecond)
	r.quiet()
	r.clk.Advance(time.Millisecond)
	r.expect("start 2")
	r.advance(hedgeDelay)
	r.expect("start 3")
	stop := rebound.Mark(errFlaky, rebound.RetryInfo{Safety: rebound.SafetyYes, ServerStop: true})
	r.outcome[3] <- stop
	// No more hedges: the timer is gone; attempt 2 is still awaited.
	r.clk.WaitPending(0)
	r.quiet()
	r.outcome[2] <- retryable(errFlaky)
	err := r.result()
	if !errors.Is(err, rebound.ErrPushback) {
		t.Fatalf("Hedge = %v, want ErrPushback", err)
	}
	var re *rebound.Error
	if errors.As(err, &re); re.Attempts != 3 {
		t.Fatalf("attempts = %d, want 3", re.Attempts)
	}
}

func TestHedgePushbackPastDeadline(t *testing.T) {
	clk := clocktest.New()
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Second))
	defer cancel()
	h, _ := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: hedgeDelay}, rebound.WithClock(clk))
	_, err := rebound.Hedge(ctx, h, func(ctx context.Context, n int) (int, error) { return 0, pushback(time.Hour) })
	if !errors.Is(err, rebound.ErrDeadline) {
		t.Fatalf("Hedge = %v, want ErrDeadline without waiting", err)
	}
}

func TestHedgeThrottleBlocksHedges(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 2, TokenRatio: 1})
	th.RecordFailure() // 1 <= threshold 1: hedges refused.
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 3}, rebound.WithBudget(th))
	r.expect("start 1") // the first attempt is always sent
	r.quiet()
	r.outcome[1] <- retryable(errFlaky)
	if err := r.result(); !errors.Is(err, rebound.ErrThrottled) {
		t.Fatalf("Hedge = %v, want ErrThrottled", err)
	}
}

func TestHedgeZeroDelaySendsAll(t *testing.T) {
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 3})
	r.expect("start 1", "start 2", "start 3")
	if r.clk.Pending() != 0 {
		t.Fatal("timer armed with zero delay")
	}
	r.outcome[3] <- nil
	r.expect("cancel 1", "cancel 2")
	if err := r.result(); err != nil || r.value != 3 {
		t.Fatalf("Hedge = %d, %v", r.value, err)
	}
}

func TestHedgeCallerCancels(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := startHedge(t, ctx, rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: hedgeDelay})
	r.expect("start 1")
	r.advance(hedgeDelay)
	r.expect("start 2")
	cancel()
	r.expect("cancel 1", "cancel 2")
	if err := r.result(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Hedge = %v, want context.Canceled", err)
	}
	if r.clk.Pending() != 0 {
		t.Fatal("timer outlived the call")
	}
}

func TestHedgeDelayFunc(t *testing.T) {
	calls := 0
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 2, HedgingDelay: time.Hour, HedgingDelayFunc: func() time.Duration {
		calls++
		return 5 * time.Millisecond
	}})
	r.expect("start 1")
	r.advance(5 * time.Millisecond)
	r.expect("start 2")
	r.outcome[1] <- nil
	r.expect("cancel 2")
	if err := r.result(); err != nil || calls != 1 {
		t.Fatalf("Hedge = %v with %d DelayFunc calls", err, calls)
	}
}

func TestHedgeFatalPushbackStopCancelsAll(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 1})
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: hedgeDelay}, rebound.WithBudget(th))
	r.expect("start 1")
	r.advance(hedgeDelay)
	r.expect("start 2")
	// A fatal status that also carries pushback "stop": fatal wins, so
	// attempt 1 is cancelled rather than awaited, and the stop still
	// counts against the throttle.
	r.outcome[2] <- rebound.Mark(errBad, rebound.RetryInfo{ServerStop: true})
	r.expect("cancel 1")
	err := r.result()
	if !errors.Is(err, errBad) || !errors.Is(err, rebound.ErrPushback) {
		t.Fatalf("Hedge = %v, want the fatal error and ErrPushback", err)
	}
	if th.Tokens() != 9000 {
		t.Fatalf("pushback stop: tokens = %d, want 9000", th.Tokens())
	}
	if r.clk.Pending() != 0 {
		t.Fatal("a hedge timer outlived the call")
	}
}

func TestHedgeCommittedCountsAgainstThrottle(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 1})
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: hedgeDelay}, rebound.WithBudget(th))
	r.expect("start 1")
	r.advance(hedgeDelay)
	r.expect("start 2")
	r.outcome[1] <- rebound.Mark(errFlaky, rebound.RetryInfo{Safety: rebound.SafetyYes, Committed: true})
	r.expect("cancel 2")
	if err := r.result(); !errors.Is(err, rebound.ErrCommitted) {
		t.Fatalf("Hedge = %v, want ErrCommitted", err)
	}
	if th.Tokens() != 9000 {
		t.Fatalf("committed non-fatal failure: tokens = %d, want 9000", th.Tokens())
	}
}

// A pushback-delayed hedge that the budget then refuses must end the call
// at once when nothing else is running, not wait for the deadline.
func TestHedgeRefusedAfterPushbackReturns(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 4, TokenRatio: 1})
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: hedgeDelay}, rebound.WithBudget(th))
	r.expect("start 1")
	r.clk.WaitCreated(1)
	th.RecordFailure() // 3 tokens; attempt 1's failure below leaves 2, at the threshold
	r.outcome[1] <- pushback(50 * time.Millisecond)
	r.clk.WaitCreated(2)
	r.clk.Advance(50 * time.Millisecond)
	if err := r.result(); !errors.Is(err, rebound.ErrThrottled) {
		t.Fatalf("Hedge = %v, want ErrThrottled at once", err)
	}
}

// Commit makes an attempt the call's answer: the others are cancelled, no
// hedge follows, and its failure is returned as committed.
func TestHedgeCommit(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 1})
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 4, HedgingDelay: hedgeDelay}, rebound.WithBudget(th))
	r.expect("start 1")
	r.advance(hedgeDelay)
	r.expect("start 2")
	r.commit[2] <- struct{}{}
	r.expect("commit 2 true", "cancel 1")
	if !r.clk.WaitPending(0) {
		t.Fatal("the hedging timer is still armed after the commit")
	}
	r.commit[2] <- struct{}{} // again: still this attempt's
	r.expect("commit 2 true")
	r.outcome[2] <- retryable(errFlaky)
	err := r.result()
	if !errors.Is(err, rebound.ErrCommitted) || !errors.Is(err, errFlaky) {
		t.Fatalf("Hedge = %v, want the committed attempt's failure", err)
	}
	var re *rebound.Error
	if !errors.As(err, &re) || re.Attempts != 2 {
		t.Fatalf("Hedge = %#v, want 2 attempts", err)
	}
	if th.Tokens() != 9000 { // the committed non-fatal failure counts
		t.Fatalf("tokens = %d, want 9000", th.Tokens())
	}
	if rebound.Commit(context.Background()) {
		t.Fatal("Commit outside a hedged attempt reported a commit")
	}
}

// Only the first commit counts.
func TestHedgeCommitFirstWins(t *testing.T) {
	r := startHedge(t, context.Background(), rebound.HedgingPolicy{MaxAttempts: 2})
	r.expect("start 1", "start 2")
	r.commit[1] <- struct{}{}
	r.expect("commit 1 true", "cancel 2")
	r.outcome[1] <- nil
	if err := r.result(); err != nil || r.value != 1 {
		t.Fatalf("Hedge = %d, %v, want attempt 1's value", r.value, err)
	}
}

// With the real clock, the timer that starts a call's hedging is kept for
// the next call once the call stopped it (see starter): on one Hedger,
// calls that answer before the delay or commit before it, and calls whose
// hedge fires, in turn, each get a timer of their own. The delay is an
// hour for the first kind, so that they never hedge, and a millisecond for
// the second, whose first attempt waits to be cancelled.
func TestHedgeRealClockTimerReused(t *testing.T) {
	var delay atomic.Int64
	h, err := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 2, HedgingDelayFunc: func() time.Duration {
		return time.Duration(delay.Load())
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		delay.Store(int64(time.Hour))
		var attempts atomic.Int32
		v, err := rebound.Hedge(context.Background(), h, func(_ context.Context, n int) (int, error) {
			attempts.Add(1)
			return n, nil
		})
		if err != nil || v != 1 || attempts.Load() != 1 {
			t.Fatalf("round %d, quick call: %d, %v after %d attempts; want 1, nil after 1", i, v, err, attempts.Load())
		}
		v, err = rebound.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
			attempts.Add(1)
			if !rebound.Commit(ctx) {
				return 0, errors.New("commit refused")
			}
			return n, nil
		})
		if err != nil || v != 1 || attempts.Load() != 2 {
			t.Fatalf("round %d, committed call: %d, %v after %d attempts; want 1, nil after 1", i, v, err, attempts.Load()-1)
		}
		delay.Store(int64(time.Millisecond))
		v, err = rebound.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
			if n == 2 {
				return n, nil
			}
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if err != nil || v != 2 {
			t.Fatalf("round %d, slow call: %d, %v; want the hedge's 2", i, v, err)
		}
	}
}
