package suite

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// hinting fails the first call with c, a RetryInfo of delay d (none when
// nil) and the pushback header (when not empty), then echoes.
func hinting(c code, d *durationpb.Duration, pushback string) handlers {
	return handlers{unary: func(in *call) (string, error) {
		if in.n > 1 {
			return "ok", nil
		}
		f := fail(c, "try later")
		if d != nil {
			f.details = []proto.Message{&errdetails.RetryInfo{RetryDelay: d}}
		}
		if pushback != "" {
			f.with("grpc-retry-pushback-ms", pushback)
		}
		return "", f
	}}
}

func TestRetryInfo(t *testing.T) {
	// The backoff before the first retry is random(0, 100ms) at 0.5:
	// 50ms.
	for _, tc := range []struct {
		name     string
		delay    *durationpb.Duration
		pushback string
		opts     []option
		attempts int
		sleeps   []time.Duration
		reason   error
	}{
		{name: "honoured", delay: durationpb.New(3 * time.Second), attempts: 2, sleeps: []time.Duration{3 * time.Second}},
		{name: "minimum, not exact", delay: durationpb.New(time.Millisecond), attempts: 2, sleeps: []time.Duration{50 * time.Millisecond}},
		{name: "beyond the default cap", delay: durationpb.New(90 * time.Second), attempts: 1, reason: rebound.ErrRetryDelayTooLong},
		{name: "beyond a lowered cap", delay: durationpb.New(3 * time.Second), opts: []option{withRetryDelayCap(time.Second)},
			attempts: 1, reason: rebound.ErrRetryDelayTooLong},
		{name: "pushback wins", delay: durationpb.New(3 * time.Second), pushback: "200", attempts: 2, sleeps: []time.Duration{200 * time.Millisecond}},
		{name: "pushback stop wins", delay: durationpb.New(3 * time.Second), pushback: "-1", attempts: 1, reason: rebound.ErrPushback},
		{name: "negative ignored", delay: durationpb.New(-time.Second), attempts: 2, sleeps: []time.Duration{50 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, e env) {
				s := e.start(t, hinting(serviceconfig.Unavailable, tc.delay, tc.pushback))
				c, clk := e.dialAuto(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), tc.opts...)
				_, err := c.unary(context.Background(), "x", nil)
				if got := s.count(unary); got != tc.attempts {
					t.Fatalf("server saw %d attempts, want %d (err %v)", got, tc.attempts, err)
				}
				if (tc.reason == nil) != (err == nil) || (tc.reason != nil && (!errors.Is(err, tc.reason) || e.codeOf(err) != serviceconfig.Unavailable)) {
					t.Fatalf("err %v, want reason %v", err, tc.reason)
				}
				if got := clk.Sleeps(); !slices.Equal(got, tc.sleeps) {
					t.Fatalf("waited %v, want %v", got, tc.sleeps)
				}
			})
		})
	}
}

func TestRetryInfoRequired(t *testing.T) {
	for _, tc := range []struct {
		name     string
		delay    *durationpb.Duration
		attempts int
	}{
		{"with RetryInfo", durationpb.New(time.Second), 2},
		{"without", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachMajor(t, protocol{}, func(t *testing.T, e env) {
				s := e.start(t, hinting(serviceconfig.ResourceExhausted, tc.delay, ""))
				c, _ := e.dialAuto(t, s, retryConfig(t, 3, `"UNAVAILABLE","RESOURCE_EXHAUSTED"`, ""),
					withRetryInfoRequired(serviceconfig.ResourceExhausted))
				_, err := c.unary(context.Background(), "x", nil)
				if got := s.count(unary); got != tc.attempts || (tc.attempts == 1) != errors.Is(err, rebound.ErrNotRetryable) {
					t.Fatalf("%d attempts, err %v; want %d", got, err, tc.attempts)
				}
			})
		})
	}
}

// TestRetryInfoDelaysHedge: a non-fatal failure with RetryInfo holds the
// next hedge back for retry_delay; without it the hedge would go at once.
func TestRetryInfoDelaysHedge(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		s := e.start(t, hinting(serviceconfig.Unavailable, durationpb.New(3*time.Second), ""))
		clk := clocktest.New()
		c, _ := e.dialWith(t, s, hedgeConfig(t, 2, "10s", `"UNAVAILABLE"`, ""), withClock(clk))
		done := make(chan error)
		go func() {
			_, err := c.unary(context.Background(), "x", nil)
			done <- err
		}()
		// The hedging delay's timer, then the RetryInfo's in its place.
		if !clk.WaitCreated(2) || !clk.WaitPending(1) {
			t.Fatal("no timer for the next hedge")
		}
		if got := s.count(unary); got != 1 {
			t.Fatalf("%d attempts before the delay, want 1", got)
		}
		clk.Advance(3 * time.Second)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got, want := clk.Sleeps(), []time.Duration{10 * time.Second, 3 * time.Second}; !slices.Equal(got, want) || s.count(unary) != 2 {
			t.Fatalf("timers %v, %d attempts; want %v, 2", got, s.count(unary), want)
		}
	})
}
