package perattempt

import (
	"context"
	"errors"
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

// TestTimedOutParentEnded: when the call's context ended, its cause is the
// call's, even if the attempt's timer fired too.
func TestTimedOutParentEnded(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	a, _, acancel := Start(parent, time.Nanosecond)
	defer acancel()
	<-a.Done()
	cancel()
	if TimedOut(parent, a) || ServerTimedOut(parent, a, time.Second) {
		t.Fatal("a timeout reported after the call ended")
	}
}

func TestServerTimedOut(t *testing.T) {
	parent := context.Background()
	a, c := WithDeadline(parent, time.Millisecond)
	defer c()
	if !ServerTimedOut(parent, a, time.Millisecond) {
		t.Fatal("an attempt due within the slack is not a server-side timeout")
	}
	b, c2 := WithDeadline(parent, time.Hour)
	defer c2()
	if ServerTimedOut(parent, b, time.Hour/10) || ServerTimedOut(parent, parent, time.Second) {
		t.Fatal("an attempt far from its deadline, or without one, counts as timed out")
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
