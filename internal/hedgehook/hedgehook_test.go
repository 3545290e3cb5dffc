package hedgehook_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/hedgehook"
	"github.com/rebound-go/rebound/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// then runs once, on the winner's goroutine, before the losing attempt is
// cancelled: it waits a while and finds the loser's context still live (were
// then called after the machinery heard of the commit, the loser would be
// cancelled meanwhile). A loser's commit and a second commit call nothing.
func TestCommitThenBeforeOthersCancelled(t *testing.T) {
	h, err := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	var (
		calls     int
		loserLive bool
		lost      = make(chan context.Context, 1)
	)
	then := func(ctx context.Context) {
		calls++
		if ctx.Value(winnerKey{}) == nil {
			t.Error("then got a context other than the one passed to Commit")
		}
		loser := <-lost
		time.Sleep(20 * time.Millisecond) // give a wrong order its chance
		loserLive = loser.Err() == nil
		lost <- loser
	}
	v, err := rebound.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
		if n == 1 {
			lost <- ctx
			<-ctx.Done()
			if hedgehook.Commit(ctx, then) {
				return 0, errors.New("the cancelled attempt committed")
			}
			return 0, ctx.Err()
		}
		ctx = context.WithValue(ctx, winnerKey{}, true)
		if !hedgehook.Commit(ctx, then) {
			return 0, errors.New("the commit was refused")
		}
		if !hedgehook.Commit(ctx, then) { // again: still this attempt's, then not called
			return 0, errors.New("the second commit was refused")
		}
		return n, nil
	})
	if err != nil || v != 2 {
		t.Fatalf("Hedge = %d, %v; want 2, nil", v, err)
	}
	if calls != 1 {
		t.Errorf("then called %d times, want once", calls)
	}
	if !loserLive {
		t.Error("the losing attempt was cancelled before then returned")
	}
	if hedgehook.Commit(context.Background(), func(context.Context) { t.Error("then called outside a hedged attempt") }) {
		t.Error("Commit outside a hedged attempt reported a commit")
	}
}

type winnerKey struct{}
