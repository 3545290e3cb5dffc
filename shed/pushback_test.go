package shed_test

import (
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/shed"
)

// What the Shedder says is what rebound's clients read: the pushback
// header parses back to the delay in whole milliseconds (or stop), and
// Retry-After to at least the delay, in whole seconds.
func FuzzPushbackWords(f *testing.F) {
	for _, d := range []int64{0, 1, int64(time.Millisecond), int64(999 * time.Millisecond), int64(time.Second), int64(time.Minute)} {
		f.Add(d, false)
	}
	f.Add(int64(0), true)
	f.Fuzz(func(t *testing.T, ns int64, stop bool) {
		if ns < 0 || ns > int64(time.Minute) {
			return // the Shedder's delays are in [1ms, 1m]
		}
		pb := shed.Pushback{Stop: stop, Delay: time.Duration(ns)}
		d, gotStop, present := a6.ParsePushback([]string{pb.Millis()})
		if !present || gotStop != stop || !stop && d != pb.Delay.Truncate(time.Millisecond) {
			t.Fatalf("%+v: header %q parses to %v, stop %v", pb, pb.Millis(), d, gotStop)
		}
		ra, ok := httpretry.ParseRetryAfter(pb.RetryAfter(), time.Now())
		switch {
		case !ok, ra < time.Second:
			t.Fatalf("%+v: Retry-After %q parses to %v, %v", pb, pb.RetryAfter(), ra, ok)
		case stop && ra <= rebound.DefaultRetryDelayCap:
			t.Fatalf("%+v: stop's Retry-After %v is within the clients' default cap", pb, ra)
		case !stop && (ra < pb.Delay || ra-pb.Delay > time.Second):
			t.Fatalf("%+v: Retry-After %v, want the delay rounded up to a second", pb, ra)
		}
	})
}
