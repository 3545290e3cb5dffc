package rebound_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

var errBoom = errors.New("boom from a callback")

// raised runs f and returns what it panicked with on this goroutine.
func raised(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// carried checks that v is a panic carried from another goroutine: an
// error that keeps the original value (errors.Is finds errBoom) and whose
// message holds it and the stack of the goroutine where it happened,
// down to fn.
func carried(t *testing.T, v any, fn string) {
	t.Helper()
	err, ok := v.(error)
	if !ok || !errors.Is(err, errBoom) {
		t.Fatalf("recovered %#v, want a panic carrying errBoom", v)
	}
	if msg := err.Error(); !strings.Contains(msg, errBoom.Error()) || !strings.Contains(msg, fn) {
		t.Fatalf("panic message %q lacks the value or the frame %s", msg, fn)
	}
}

// blockUntilCancelled is an attempt that waits for its context, counting
// the attempts that ended so.
func blockUntilCancelled(ctx context.Context, ended *atomic.Int32) (int, error) {
	<-ctx.Done()
	ended.Add(1)
	return 0, ctx.Err()
}

// TestHedgePanicInHedge: an attempt that panics on its hedge's goroutine
// does not end the process: Hedge raises the panic on the caller's
// goroutine, once the other attempts are cancelled and have returned.
func TestHedgePanicInHedge(t *testing.T) {
	h, err := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: 0})
	if err != nil {
		t.Fatal(err)
	}
	var ended atomic.Int32
	v := raised(func() {
		_, _ = rebound.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
			if n == 2 {
				panicInHedge()
			}
			return blockUntilCancelled(ctx, &ended)
		})
	})
	carried(t, v, "panicInHedge")
	if got := ended.Load(); got != 2 {
		t.Fatalf("%d of the other attempts returned, cancelled, before the panic was raised; want 2", got)
	}
}

func panicInHedge() { panic(errBoom) }

// TestHedgePanicInClassifier: a classifier that panics while the
// machinery of hedges judges a failed attempt, on the machinery's
// goroutine, is raised on the caller's.
func TestHedgePanicInClassifier(t *testing.T) {
	classify := rebound.WithClassifier(func(error) rebound.RetryInfo { panicInClassifier(); return rebound.RetryInfo{} })
	h, err := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: 0}, classify)
	if err != nil {
		t.Fatal(err)
	}
	var ended atomic.Int32
	v := raised(func() {
		_, _ = rebound.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
			if n == 3 {
				return 0, errors.New("attempt 3 fails")
			}
			return blockUntilCancelled(ctx, &ended)
		})
	})
	carried(t, v, "panicInClassifier")
	if got := ended.Load(); got != 2 {
		t.Fatalf("%d attempts returned, cancelled, before the panic was raised; want 2", got)
	}
}

func panicInClassifier() { panic(errBoom) }

// TestHedgePanicInDelayFunc: HedgingDelayFunc, asked for the next delay
// on the machinery's goroutine, panics there.
func TestHedgePanicInDelayFunc(t *testing.T) {
	var calls atomic.Int32
	h, err := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelayFunc: func() time.Duration {
		if calls.Add(1) > 1 {
			panicInDelay()
		}
		return time.Millisecond
	}})
	if err != nil {
		t.Fatal(err)
	}
	var ended atomic.Int32
	v := raised(func() {
		_, _ = rebound.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
			return blockUntilCancelled(ctx, &ended)
		})
	})
	carried(t, v, "panicInDelay")
	if got := ended.Load(); got != 2 {
		t.Fatalf("%d attempts returned, cancelled, before the panic was raised; want 2 (the first and the one hedge sent)", got)
	}
}

func panicInDelay() { panic(errBoom) }

// TestHedgePanicInFirstAttempt: attempt 1 runs on the caller's goroutine;
// when it panics while hedges run, the panic goes on, as it is, once the
// hedges are cancelled and have returned.
func TestHedgePanicInFirstAttempt(t *testing.T) {
	h, err := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: 0})
	if err != nil {
		t.Fatal(err)
	}
	var (
		ended   atomic.Int32
		started = make(chan struct{}, 3)
	)
	v := raised(func() {
		_, _ = rebound.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
			started <- struct{}{}
			if n == 1 {
				<-started
				<-started // both hedges are out
				panic(errBoom)
			}
			return blockUntilCancelled(ctx, &ended)
		})
	})
	if v != errBoom {
		t.Fatalf("recovered %#v, want errBoom as it was raised", v)
	}
	if got := ended.Load(); got != 2 {
		t.Fatalf("%d hedges returned, cancelled, before the panic went on; want 2", got)
	}
}

// TestHedgePanicInHookOnCallersLoop: the first attempt fails before any
// hedge, so the caller's goroutine runs the loop; a hook that panics
// there, as the delay sends hedge 3, leaves no hedge behind.
func TestHedgePanicInHookOnCallersLoop(t *testing.T) {
	clk := clocktest.New()
	h, err := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: time.Second}, rebound.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var ended atomic.Int32
	c := rebound.Call[int]{OnHedge: func(n int) {
		if n == 3 {
			panic(errBoom)
		}
	}}
	second := make(chan struct{})
	go func() {
		<-second
		// Attempt 2 runs, and hedge 3 is due in a second.
		clk.WaitPending(1)
		clk.Advance(time.Second)
	}()
	v := raised(func() {
		_, _ = c.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
			if n == 1 {
				return 0, rebound.Mark(errors.New("attempt 1 fails"), rebound.RetryInfo{Safety: rebound.SafetyYes})
			}
			close(second)
			return blockUntilCancelled(ctx, &ended)
		})
	})
	if v != errBoom {
		t.Fatalf("recovered %#v, want errBoom", v)
	}
	if got := ended.Load(); got != 1 {
		t.Fatalf("%d hedges returned, cancelled, before the panic went on; want 1", got)
	}
}
