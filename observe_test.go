package rebound_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

type recordingObserver struct {
	mu     sync.Mutex
	events []string
}

func (r *recordingObserver) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
}

func (r *recordingObserver) Retrying(attempt int, err error, delay time.Duration) {
	r.add(fmt.Sprintf("retrying after %d: %v in %v", attempt, err, delay))
}
func (r *recordingObserver) Hedging(attempt int) { r.add(fmt.Sprintf("hedge %d", attempt)) }

func (r *recordingObserver) Throttled(attempt int) { r.add(fmt.Sprintf("throttled %d", attempt)) }
func (r *recordingObserver) GaveUp(attempts int, err, reason error) {
	r.add(fmt.Sprintf("gave up after %d: %v (%v)", attempts, err, reason))
}

func TestObserverDo(t *testing.T) {
	p, _ := newPolicy(t, 3)
	obs := &recordingObserver{}
	ctx := rebound.WithObserver(context.Background(), obs)
	op, _ := script(retryable(errFlaky), retryable(errFlaky), retryable(errFlaky))
	_ = rebound.Do(ctx, p, op)
	want := []string{
		"retrying after 1: flaky in 50ms",
		"retrying after 2: flaky in 100ms",
		"gave up after 3: flaky (rebound: attempts exhausted)",
	}
	if !slices.Equal(obs.events, want) {
		t.Fatalf("events %q, want %q", obs.events, want)
	}
}

func TestObserverHedge(t *testing.T) {
	h, _ := rebound.NewHedger(rebound.HedgePolicy{MaxAttempts: 3})
	obs := &recordingObserver{}
	ctx := rebound.WithObserver(context.Background(), obs)
	_, err := rebound.Hedge(ctx, h, func(ctx context.Context, n int) (int, error) { return 0, retryable(errFlaky) })
	if !errors.Is(err, rebound.ErrAttemptsExhausted) {
		t.Fatal(err)
	}
	want := []string{"hedge 2", "hedge 3", "gave up after 3: flaky (rebound: attempts exhausted)"}
	if !slices.Equal(obs.events, want) {
		t.Fatalf("events %q, want %q", obs.events, want)
	}
}
