package shedrule

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// lowRate is a run of a Limiter on virtual time: honest requests of one
// method from 5 peers, perSecond of them a second in bursts of ten (so
// that they overlap, as a loaded server's do), each taking 40 to 56ms,
// from honestFrom to honestFrom+40s; and attack requests from one more
// peer, attack a second, each taking 50µs, from attackFrom to the end.
type lowRate struct {
	perSecond, attack      int
	honestFrom, attackFrom time.Duration
}

// lowRateResult is what a run shows from settle on: the honest requests
// shed, the highest ratio the Limiter read in them (its signal after
// each), its lowest limit, and the last instant at which the baseline was
// below floor (the honest latencies' lower quartile, less one histogram
// bucket), or -1.
type lowRateResult struct {
	shed     int
	ratio    float64
	limit    int
	floor    time.Duration
	lastLow  time.Duration
	baseline time.Duration
	quartile time.Duration
	nHonest  int
}

func (s lowRate) run(c Config, settle time.Duration) lowRateResult {
	type event struct {
		at  time.Duration
		end bool
		req int
	}
	end := s.honestFrom + 40*time.Second
	var evs []event
	var honest []time.Duration
	burst := 10 * time.Second / time.Duration(s.perSecond)
	n := 0
	for at := s.honestFrom; at < end; at += burst {
		for range 10 {
			lat := 40*time.Millisecond + time.Duration(n%17)*time.Millisecond
			honest = append(honest, lat)
			evs = append(evs, event{at: at}, event{at: at + lat, end: true})
			evs[len(evs)-2].req, evs[len(evs)-1].req = n, n
			n++
		}
	}
	nHonest := n
	if s.attack > 0 {
		// The attacker comes 1µs before each honest burst it can, and
		// otherwise evenly.
		for at := s.attackFrom + time.Second - time.Microsecond; at < end; at += time.Second / time.Duration(s.attack) {
			evs = append(evs, event{at: at, req: n}, event{at: at + 50*time.Microsecond, end: true, req: n})
			n++
		}
	}
	slices.SortStableFunc(evs, func(a, b event) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		// Ends before starts at the same instant.
		switch {
		case a.end && !b.end:
			return -1
		case b.end && !a.end:
			return 1
		}
		return 0
	})
	sorted := slices.Sorted(slices.Values(honest))
	res := lowRateResult{limit: c.MaxLimit, lastLow: -1, quartile: sorted[(len(sorted)-1)/4], nHonest: nHonest}
	res.floor = time.Duration(float64(res.quartile) * math.Exp2(-1.0/bucketsPerOctave))
	l := NewLimiter(c)
	m := l.Method("/svc/Rare")
	reqs := make([]Request, n)
	admitted := make([]bool, n)
	for _, e := range evs {
		now := t0.Add(e.at)
		settled := e.at >= s.honestFrom+settle
		if !e.end {
			peer := uint64(1000) // the attacker's
			if e.req < nHonest {
				peer = uint64(e.req % 5)
			}
			v := l.Admit(now, m, "", peer, 0.5, &reqs[e.req])
			admitted[e.req] = v.Admitted
			if !v.Admitted && e.req < nHonest && settled {
				res.shed++
			}
			continue
		}
		if !admitted[e.req] {
			continue
		}
		l.End(now, &reqs[e.req], true)
		if e.at >= s.honestFrom && m.Baseline() < res.floor {
			res.lastLow = e.at - s.honestFrom
		}
		if e.req < nHonest && settled {
			res.ratio = max(res.ratio, math.Exp(l.signal))
			res.limit = min(res.limit, l.Limit())
		}
	}
	res.baseline = m.Baseline()
	return res
}

// check fails t unless, from the run's settle on, the baseline stayed
// within the honest latencies (at least their lower quartile, less one
// histogram bucket, at most 60ms), the Limiter did not read the honest
// requests as slower than its tolerance, and it neither cut its limit
// nor shed any of them.
func (r lowRateResult) check(t *testing.T, c Config, settle time.Duration) {
	t.Helper()
	if r.lastLow >= settle || r.baseline < r.floor || r.baseline > 60*time.Millisecond {
		t.Errorf("baseline %v at the end, below %v until %v after the honest requests came; want within the honest latencies (lower quartile %v) from %v",
			r.baseline, r.floor, r.lastLow, r.quartile, settle)
	}
	if r.ratio > c.Tolerance {
		t.Errorf("the honest requests read as up to %.3gx their idle latency, beyond the tolerance %v", r.ratio, c.Tolerance)
	}
	if r.shed != 0 || r.limit < c.InitialLimit {
		t.Errorf("%d of %d honest requests shed, limit down to %d (from %d)", r.shed, r.nHonest, r.limit, c.InitialLimit)
	}
}

func lowRateConfig() Config {
	c := defaults()
	c.InitialLimit = 12
	return c
}

// A lightly used method: an attacker's cheap calls must not become its
// idle latency. Honest requests of 40 to 56ms come 10, 20, 25 or 40 a
// second from five peers; from the first second one attacker peer sends
// calls that take 50µs, from as few as the honest to many more, each
// second just before an honest burst. Once the baseline has a horizon of
// intervals (21s), it is within the honest latencies, the Limiter does not
// read the honest requests as slower than its tolerance, and neither cuts
// its limit nor sheds any of them.
func TestBaselineLowRateAttack(t *testing.T) {
	c := lowRateConfig()
	const settle = 21 * time.Second
	for _, perSecond := range []int{10, 20, 25, 40} {
		for _, attack := range []int{0, 10, 25, 50, 200, 1000} {
			t.Run(fmt.Sprintf("honest %d/s, attacker %d/s", perSecond, attack), func(t *testing.T) {
				lowRate{perSecond: perSecond, attack: attack}.run(c, settle).check(t, c, settle)
			})
		}
	}
}

// An attacker alone on an idle method for 30s makes its baseline, as a
// single client would; once honest clients come, the intervals they share
// with it, under the caps, outweigh those it had alone: 3s after they came
// (2s in these runs; 16 to 17s when only the medians' lower quartile
// forgot it), the baseline is within the honest latencies, and none of
// them is shed.
func TestBaselineAttackerFirst(t *testing.T) {
	c := lowRateConfig()
	const settle = 3 * time.Second
	for _, perSecond := range []int{10, 25} {
		for _, attack := range []int{25, 1000} {
			t.Run(fmt.Sprintf("honest %d/s, attacker %d/s", perSecond, attack), func(t *testing.T) {
				s := lowRate{perSecond: perSecond, attack: attack, honestFrom: 30 * time.Second}
				s.run(c, settle).check(t, c, settle)
			})
		}
	}
}

// A service with one peer learns from it alone, and still does after
// other peers came by for a second: an interval waits at most crowdGrace
// for the others, and a sustained change of its latency is its baseline
// within a horizon (and, after three peers shared an interval, 2s more),
// as with no visitor.
func TestBaselineLonePeer(t *testing.T) {
	for _, visitors := range []int{0, 1, 2} {
		t.Run(fmt.Sprint(visitors, " visitors"), func(t *testing.T) {
			l := NewLimiter(defaults())
			m := l.Method("/svc/Get")
			now := t0
			lat := 10 * time.Millisecond
			changed := time.Time{}
			for now.Before(t0.Add(60 * time.Second)) {
				if now.Sub(t0) >= 20*time.Second && now.Sub(t0) < 21*time.Second {
					for v := range visitors {
						serve(t, l, &now, m, "", uint64(2+v), lat)
					}
				}
				if changed.IsZero() && now.Sub(t0) >= 21*time.Second {
					changed, lat = now, 20*time.Millisecond
				}
				serve(t, l, &now, m, "", 1, lat)
				now = now.Add(20 * time.Millisecond)
				switch b := m.Baseline(); {
				case changed.IsZero() && now.Sub(t0) > 2*time.Second && !within(b, 10*time.Millisecond, 0.05):
					t.Fatalf("baseline %v at %v, want about 10ms", b, now.Sub(t0))
				case !changed.IsZero() && now.Sub(changed) > horizon+2*time.Second && !within(b, 20*time.Millisecond, 0.05):
					t.Fatalf("baseline %v %v after the latency doubled, want about 20ms", b, now.Sub(changed))
				}
			}
		})
	}
}
