package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

func TestLimiterSharedAndReleased(t *testing.T) {
	name := fmt.Sprint("ratelimit-test-", time.Now().UnixNano())
	c := rebound.AdaptiveRateLimitConfig{}
	a, b := Limiter(name, c), Limiter(name, c)
	if a == nil || a != b {
		t.Fatal("one name, one setting: not shared")
	}
	if Limiter(name, rebound.AdaptiveRateLimitConfig{Beta: 0.5}) == a || Limiter(name+"x", c) == a {
		t.Fatal("another name or setting shares the limiter")
	}
	if Limiter(name, rebound.AdaptiveRateLimitConfig{Beta: 2}) != nil {
		t.Fatal("an invalid setting made a limiter")
	}
	for i := range 1000 {
		Limiter(fmt.Sprint(name, "-", i), c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for Count() > 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d limiters of dropped names remain", Count())
		}
		runtime.GC()
		runtime.Gosched()
	}
	if Limiter(name, c) != a {
		t.Fatal("a limiter still held was dropped")
	}
	runtime.KeepAlive(a)
}

// limiting returns a gate whose limiter limits at 10/s, on a clock an
// hour ahead of the real one (see clocktest.NewAhead).
func limiting(t *testing.T) (*Gate, *clocktest.Clock) {
	clk := clocktest.NewAhead()
	l, err := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 10})
	if err != nil {
		t.Fatal(err)
	}
	l.Observe(l.Reserve(clk.Now()), clk.Now(), rebound.RateFeedback{SlowDown: true})
	return &Gate{Limiter: l, Clock: clk}, clk
}

func TestWaitDeadline(t *testing.T) {
	g, clk := limiting(t)
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(50*time.Millisecond))
	defer cancel()
	if _, err := g.Wait(ctx); !errors.Is(err, rebound.ErrRateLimited) {
		t.Fatalf("a turn 100ms away with 50ms left: %v, want ErrRateLimited at once", err)
	}
	if n := len(clk.Sleeps()); n != 0 {
		t.Fatalf("%d waits, want none", n)
	}
	// The token was given back: the next turn is still 100ms away.
	done := make(chan error)
	go func() { _, err := g.Wait(context.Background()); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatal("no wait")
	}
	if d := clk.Sleeps()[0]; d != 100*time.Millisecond {
		t.Fatalf("wait %v, want 100ms", d)
	}
	clk.Advance(100 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWaitCancelled(t *testing.T) {
	g, clk := limiting(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := g.Wait(ctx); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatal("no wait")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want the context's cause", err)
	}
	if clk.Pending() != 0 {
		t.Fatal("the cancelled wait left its timer")
	}
	go func() { _, err := g.Wait(context.Background()); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatal("no wait")
	}
	if s := clk.Sleeps(); s[1] != s[0] {
		t.Fatalf("waits %v: the cancelled one's token was not given back", s)
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestNilGate(t *testing.T) {
	var g *Gate
	if _, err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.Observe(rebound.Reservation{}, rebound.RateFeedback{SlowDown: true})
	if f := Feedback(8, false, -time.Second); f != (rebound.RateFeedback{SlowDown: true}) {
		t.Fatalf("%+v: a negative wait must be none", f)
	}
}

// TestVerdict: an answer held for the classifier reaches the limiter once,
// with the classifier's word when it changed the SlowDown mark, with the
// limit's own rules when it did not, or as the rules judge it when no
// classifier saw it.
func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		name            string
		builtin         bool // the limit's own rules: a throttle
		given, returned bool // the SlowDown mark the classifier got and gave
		release         bool // no classifier saw it
		want            bool // the limit switched on
	}{
		{"marked", false, false, true, false, true},
		{"unmarked", true, true, false, false, false},
		{"left, a throttle by the rules", true, false, false, false, true},
		{"left, no throttle", false, false, false, false, false},
		{"released throttle", true, false, false, true, true},
		{"released answer", false, false, false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
			if err != nil {
				t.Fatal(err)
			}
			g := &Gate{Limiter: l, Clock: clocktest.New()}
			ctx, v := Await(context.Background(), true)
			r, err := g.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			g.Answer(ctx, r, true, rebound.RateFeedback{SlowDown: c.builtin})
			if l.Rate() != 0 {
				t.Fatal("the limiter heard of the answer before the verdict")
			}
			if c.release {
				v.Release()
			} else {
				v.Settle(rebound.RetryInfo{SlowDown: c.given}, rebound.RetryInfo{SlowDown: c.returned})
			}
			if on := l.Rate() != 0; on != c.want {
				t.Fatalf("limit on: %v, want %v", on, c.want)
			}
			// Settled once: a second verdict is not heard.
			v.Settle(rebound.RetryInfo{}, rebound.RetryInfo{SlowDown: true})
			if on := l.Rate() != 0; on != c.want {
				t.Fatal("a second verdict was heard")
			}
		})
	}
	// Without a Verdict in the context, or for a success, the answer is
	// heard at once; a nil Verdict holds nothing.
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	g := &Gate{Limiter: l, Clock: clocktest.New()}
	g.Answer(context.Background(), rebound.Reservation{}, true, rebound.RateFeedback{SlowDown: true})
	if l.Rate() == 0 {
		t.Fatal("an answer without a Verdict was not heard at once")
	}
	ctx, v := Await(context.Background(), true)
	l2, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	(&Gate{Limiter: l2, Clock: clocktest.New()}).Answer(ctx, rebound.Reservation{}, false, rebound.RateFeedback{SlowDown: true})
	if l2.Rate() == 0 {
		t.Fatal("a success's answer was held")
	}
	v.Release()
	var none *Verdict
	none.Settle(rebound.RetryInfo{}, rebound.RetryInfo{SlowDown: true})
	none.Release()
	if _, v := Await(context.Background(), false); v != nil {
		t.Fatal("Await made a Verdict when off")
	}
}

// TestWaitSlowStart: before the first throttle, four attempts go at once;
// the fifth waits for an answer, not for a time, and goes when one comes;
// a wait that no answer ends goes when the slow start ends, a
// quarter-second after the first attempt; a deadline sooner than that
// does not fail it at once; a cancelled wait leaves no timer.
func TestWaitSlowStart(t *testing.T) {
	clk := clocktest.NewAhead()
	l, err := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{Limiter: l, Clock: clk}
	var first []rebound.Reservation
	for range 4 {
		r, err := g.Wait(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, r)
	}
	if clk.Pending() != 0 {
		t.Fatal("one of the first four attempts waits")
	}
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(100*time.Millisecond))
	defer cancel()
	done := make(chan error)
	go func() { _, err := g.Wait(ctx); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatal("the fifth attempt did not wait")
	}
	if d := clk.Sleeps()[0]; d != 250*time.Millisecond {
		t.Fatalf("the fifth attempt waits at most %v, want until the slow start ends, 250ms", d)
	}
	g.Observe(first[0], rebound.RateFeedback{})
	if err := <-done; err != nil {
		t.Fatalf("after an answer: %v, want the attempt to go", err)
	}
	if clk.Pending() != 0 {
		t.Fatal("the wait that an answer ended left its timer")
	}

	// 4 in flight of a window of 5: one more goes at once; the next
	// waits, and no answer comes.
	if _, err := g.Wait(context.Background()); err != nil || clk.Pending() != 0 {
		t.Fatalf("the sixth attempt: %v, %d waits; want it to go at once", err, clk.Pending())
	}
	go func() { _, err := g.Wait(context.Background()); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatal("the seventh attempt did not wait")
	}
	clk.Advance(250 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("at the slow start's end: %v, want the attempt to go", err)
	}

	// A cancelled wait.
	l, _ = rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	g = &Gate{Limiter: l, Clock: clk}
	for range 4 {
		g.Wait(context.Background())
	}
	ctx, cancel = context.WithCancel(context.Background())
	go func() { _, err := g.Wait(ctx); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatal("the fifth attempt did not wait")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want the context's cause", err)
	}
	if clk.Pending() != 0 {
		t.Fatal("the cancelled wait left its timer")
	}
}

// steppedCtx is a context with a deadline whose Deadline method waits for
// the test's word, so that the test decides how the callers of Wait
// interleave; entered tells it a caller is there.
type steppedCtx struct {
	context.Context
	dl      time.Time
	entered chan struct{}
	step    chan struct{}
}

func (c steppedCtx) Deadline() (time.Time, bool) {
	c.entered <- struct{}{}
	<-c.step
	return c.dl, true
}

// TestWaitRefusalsInterleaved: callers refused for their deadline leave
// nothing behind in the limiter, however their refusals interleave. Two
// callers at 10/s whose turns (100 and 200ms away) would come after their
// deadline (50ms): the first is refused, then the second. Ten such pairs,
// and a caller alone with a deadline 500ms away still gets the turn 100ms
// away. (When a refusal took a token and gave it back, the first could
// not give its back, the second's turn was later; each pair left a turn
// nobody used at the end of the queue, the queue ran a second ahead, and
// the caller alone was refused: on a busy machine, callers refused in a
// tight loop ran it ahead of every deadline, and the client sent nothing
// after the server had stopped refusing.)
func TestWaitRefusalsInterleaved(t *testing.T) {
	g, clk := limiting(t)
	for range 10 {
		var ctxs [2]steppedCtx
		errs := make(chan error, 2)
		for i := range ctxs {
			ctxs[i] = steppedCtx{context.Background(), clk.Now().Add(50 * time.Millisecond), make(chan struct{}), make(chan struct{})}
			go func() { _, err := g.Wait(ctxs[i]); errs <- err }()
			<-ctxs[i].entered
		}
		for i := range ctxs {
			ctxs[i].step <- struct{}{}
			if err := <-errs; !errors.Is(err, rebound.ErrRateLimited) {
				t.Fatalf("caller %d: %v, want ErrRateLimited", i, err)
			}
		}
	}
	if n := len(clk.Sleeps()); n != 0 {
		t.Fatalf("%d waits, want none: every caller was refused at once", n)
	}
	alone := steppedCtx{context.Background(), clk.Now().Add(500 * time.Millisecond), make(chan struct{}, 1), make(chan struct{})}
	close(alone.step)
	done := make(chan error)
	go func() { _, err := g.Wait(alone); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatalf("the caller alone did not wait for its turn: %v", <-done)
	}
	if d := clk.Sleeps()[0]; d != 100*time.Millisecond {
		t.Fatalf("the caller alone waits %v, want 100ms", d)
	}
	clk.Advance(100 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
