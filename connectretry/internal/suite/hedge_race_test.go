package suite

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound/serviceconfig"
)

// TestHedgedServerStreamsAtOnce: hedges of a server stream that go at once
// (hedgingDelay 0s, the failed ones replaced at once) each make their
// request while the others make theirs. connect-go v1 records each
// request's HTTP method on the caller's request from the goroutine that
// sends it; run under -race, this fails if two attempts' requests are
// made without their turns (see connectretry's turn.go).
func TestHedgedServerStreamsAtOnce(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{serverStream: func(in *call, send func(string) error) error {
			if in.n < 3 {
				return fail(serviceconfig.Unavailable, "again")
			}
			return send("ok")
		}})
		c, _ := e.dialManual(t, s, hedgeConfig(t, 3, "0s", `"UNAVAILABLE"`, ""))
		for range 50 {
			s.forget()
			st, err := c.open(context.Background(), serverStream, "m", nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := receiveAll(t, st)
			if err != nil || !slices.Equal(got, []string{"ok"}) {
				t.Fatalf("received %q, %v; want the third attempt's message", got, err)
			}
		}
	})
}

// TestHedgedServerStreamPassesAHangingAttempt: a hedge of a server stream
// goes out while the first attempt still waits for its server's response
// headers, and wins; the first attempt is cancelled. connect v1 makes a
// server stream's request in Send, which returns once the response
// headers arrive: a hedge that waited for an earlier attempt's Send to
// return, to keep clear of the race above, would wait here until the
// call's context ends.
func TestHedgedServerStreamPassesAHangingAttempt(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		var cancelled atomic.Int32
		s := e.start(t, handlers{serverStream: func(in *call, send func(string) error) error {
			if in.previous < 1 {
				<-in.ctx.Done()
				cancelled.Add(1)
				return in.ctx.Err()
			}
			return send("ok")
		}})
		c, _ := e.dialManual(t, s, hedgeConfig(t, 2, "0s", `"UNAVAILABLE"`, ""))
		const calls = 5
		for range calls {
			// The call's deadline, which ends the first attempt if nothing else does, is long enough for a loaded machine.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			st, err := c.open(ctx, serverStream, "m", nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := receiveAll(t, st)
			cancel()
			if err != nil || !slices.Equal(got, []string{"ok"}) {
				t.Fatalf("received %q, %v; want the hedge's message", got, err)
			}
		}
		for deadline := time.Now().Add(10 * time.Second); cancelled.Load() < int32(s.count(serverStream)-calls); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of the server's %d hanging attempts saw their context end", cancelled.Load(), s.count(serverStream)-calls)
			}
		}
	})
}
