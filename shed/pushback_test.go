package shed_test

import (
	"math"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/shed"
)

// What the Shedder says is what rebound's clients read: the pushback
// header parses back to the delay in whole milliseconds (or stop), and
// Retry-After to the delay rounded down or up to a whole second (or a
// pause beyond httpretry's cap, for stop).
func FuzzPushbackWords(f *testing.F) {
	for _, d := range []int64{0, 1, int64(time.Millisecond), int64(999 * time.Millisecond), int64(time.Second), int64(time.Minute)} {
		f.Add(d, false, 0.5)
	}
	f.Add(int64(0), true, 0.0)
	f.Fuzz(func(t *testing.T, ns int64, stop bool, u float64) {
		if ns < 0 || ns > int64(time.Minute) || !(u >= 0 && u < 1) {
			return // the Shedder's delays are in [1ms, 1m], u in [0, 1)
		}
		pb := shed.Pushback{Stop: stop, Delay: time.Duration(ns)}
		d, gotStop, present := a6.ParsePushback([]string{pb.Millis()})
		if !present || gotStop != stop || !stop && d != pb.Delay.Truncate(time.Millisecond) {
			t.Fatalf("%+v: header %q parses to %v, stop %v", pb, pb.Millis(), d, gotStop)
		}
		ra, ok := httpretry.ParseRetryAfter(pb.RetryAfter(u), time.Now())
		down := time.Duration(math.Floor(pb.Delay.Seconds())) * time.Second
		switch {
		case !ok:
			t.Fatalf("%+v: Retry-After %q does not parse", pb, pb.RetryAfter(u))
		case stop && ra <= rebound.DefaultRetryDelayCap:
			t.Fatalf("%+v: stop's Retry-After %v is within the clients' default cap", pb, ra)
		case !stop && ra != down && ra != down+time.Second:
			t.Fatalf("%+v, u %v: Retry-After %v, want the delay rounded down or up to a second", pb, u, ra)
		case !stop && ra == down+time.Second && pb.Delay == down:
			t.Fatalf("%+v, u %v: Retry-After %v, a whole second rounded up", pb, u, ra)
		}
	})
}

// Retry-After rounds at random so that, on average, a client told a
// delay waits it: the share rounded up is the delay's fraction of a
// second.
func TestRetryAfterSpread(t *testing.T) {
	pb := shed.Pushback{Delay: 1300 * time.Millisecond}
	var sum float64
	counts := map[string]int{}
	const n = 1000
	for i := range n {
		v := pb.RetryAfter((float64(i) + 0.5) / n)
		counts[v]++
		ra, _ := httpretry.ParseRetryAfter(v, time.Now())
		sum += ra.Seconds()
	}
	if counts["1"] != 700 || counts["2"] != 300 || math.Abs(sum/n-1.3) > 1e-9 {
		t.Fatalf("Retry-After of 1.3s over %d draws: %v, mean %vs; want 700 × 1 and 300 × 2, mean 1.3s", n, counts, sum/n)
	}
}
