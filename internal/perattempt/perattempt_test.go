package perattempt

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

func TestWithDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if a, c := WithDeadline(ctx, 0); a != ctx {
		t.Fatal("a zero timeout made a new context")
	} else {
		c()
	}
	if a, c := WithDeadline(ctx, 2*time.Hour); a != ctx {
		t.Fatal("a timeout past the call's deadline made a new context")
	} else {
		c()
	}
	a, c := WithDeadline(ctx, time.Nanosecond)
	defer c()
	<-a.Done()
	if context.Cause(a) != rebound.ErrAttemptTimeout || !TimedOut(ctx, a) {
		t.Fatalf("cause %v, want ErrAttemptTimeout", context.Cause(a))
	}
}

func TestStartStop(t *testing.T) {
	a, timer, cancel := Start(context.Background(), time.Hour)
	if timer == nil || !timer.Stop() {
		t.Fatal("the timer was not running")
	}
	cancel()
	if TimedOut(context.Background(), a) {
		t.Fatal("a cancelled attempt counts as timed out")
	}
	a, _, cancel = Start(context.Background(), time.Nanosecond)
	defer cancel()
	<-a.Done()
	if !TimedOut(context.Background(), a) {
		t.Fatal("a fired timer does not count as a timeout")
	}
	var nilTimer *Timer
	if !nilTimer.Stop() {
		t.Fatal("a nil timer's Stop")
	}
}

// TestStopSettlesTheRace: Stop answers the same however often it is
// called, and once either side has won, the other cannot change the
// outcome: a stopped timer never cuts the attempt, and a fired one
// reports false, so that headers that came at that instant do not commit
// the call to an attempt whose context is cut.
func TestStopSettlesTheRace(t *testing.T) {
	a, timer, cancel := Start(context.Background(), time.Hour)
	defer cancel()
	// The first Stop, as headers that commit the attempt make it, wins
	// the race against the timer; the second, as the attempt's cancel
	// func makes it when the attempt ends, must give the same answer.
	if !timer.Stop() {
		t.Fatal("Stop before the timer fired reports it fired")
	}
	if !timer.Stop() {
		t.Fatal("a timer stopped before it fired reports it fired on a second Stop")
	}
	if a.Err() != nil {
		t.Fatalf("a stopped timer's attempt ended: %v", a.Err())
	}

	b, timer, bcancel := Start(context.Background(), time.Nanosecond)
	defer bcancel()
	<-b.Done()
	// The timer won: the first Stop (headers at that instant) finds it
	// fired, and the second (the cancel func) must not turn that into a
	// stop in time.
	if timer.Stop() {
		t.Fatal("Stop after the timer fired reports it stopped in time")
	}
	if timer.Stop() {
		t.Fatal("a second Stop after the timer fired reports it stopped in time")
	}
	if context.Cause(b) != rebound.ErrAttemptTimeout {
		t.Fatalf("cause %v, want ErrAttemptTimeout", context.Cause(b))
	}

	// Stop racing the timer, many times: whoever wins, Stop's answer
	// matches whether the attempt was cut.
	for range 2000 {
		c, timer, ccancel := Start(context.Background(), time.Microsecond)
		time.Sleep(time.Duration(rand.IntN(3)) * time.Microsecond)
		stoppedInTime := timer.Stop()
		if stoppedInTime {
			// Give a timer that lost the race the time to (wrongly) cut.
			time.Sleep(10 * time.Microsecond)
			if context.Cause(c) == rebound.ErrAttemptTimeout {
				ccancel()
				t.Fatal("Stop reported true, but the timer cut the attempt")
			}
		} else {
			<-c.Done()
			if context.Cause(c) != rebound.ErrAttemptTimeout {
				ccancel()
				t.Fatalf("Stop reported false, but the attempt ended with %v", context.Cause(c))
			}
		}
		ccancel()
	}
}

// TestTimedOutParentEnded: when the call's context ended, its cause is the
// call's, even if the attempt's timer fired too.
func TestTimedOutParentEnded(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	a, _, acancel := Start(parent, time.Nanosecond)
	defer acancel()
	<-a.Done()
	cancel()
	if TimedOut(parent, a) || Cut(parent, a, time.Second) {
		t.Fatal("a timeout reported after the call ended")
	}
}

// TestCut: a failed attempt is cut by its deadline when its context ended
// for it, or when the deadline is due within the slack, whatever the
// failure; not when it is far, when the call's deadline comes first, or
// without a timeout.
func TestCut(t *testing.T) {
	parent := context.Background()
	a, c := WithDeadline(parent, time.Millisecond)
	defer c()
	if !Cut(parent, a, time.Millisecond) {
		t.Fatal("an attempt due within the slack is not cut")
	}
	<-a.Done()
	if !Cut(parent, a, time.Millisecond) {
		t.Fatal("an attempt whose deadline passed is not cut")
	}
	b, c2 := WithDeadline(parent, time.Hour)
	defer c2()
	if Cut(parent, b, time.Hour/10) || Cut(parent, parent, time.Second) || Cut(parent, a, 0) {
		t.Fatal("an attempt far from its deadline, without one, or without a timeout, counts as cut")
	}
	// The call's deadline comes first: WithDeadline left it alone, and an
	// attempt that fails near it was not cut by its own timeout.
	call, c3 := context.WithTimeout(parent, time.Millisecond)
	defer c3()
	d, c4 := WithDeadline(call, time.Hour)
	defer c4()
	if Cut(call, d, time.Hour) {
		t.Fatal("an attempt near the call's deadline counts as cut by its own")
	}
}

func TestError(t *testing.T) {
	err := NewError("x", time.Second)
	if !errors.Is(err, rebound.ErrAttemptTimeout) || !err.Timeout() || err.Error() != "x: per-attempt timeout (1s) exceeded before the response started" {
		t.Fatalf("%v", err)
	}
	if info := Info(true); info.Safety != rebound.SafetyYes || !info.Timeout || !info.Committed {
		t.Fatalf("Info(true) = %+v", info)
	}
}
