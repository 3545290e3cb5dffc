package shedrule

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// lowRateRun drives a Limiter for 40s of virtual time: honest requests of
// the method from 5 peers, perSecond of them a second in bursts of ten
// (so that they overlap, as a loaded server's do), each taking 40 to 56ms;
// and, from the first second, attack requests from one more peer, attack
// a second, each taking 50µs. It returns the method, the honest
// latencies' lower quartile, and, from 21s on (once the baseline has a
// full horizon of intervals), the honest requests shed, the highest
// ratio the Limiter read in the honest requests (its signal after each)
// and its lowest limit.
func lowRateRun(t *testing.T, c Config, perSecond, attack int) (m *Method, quartile time.Duration, shed int, ratio float64, limit int) {
	t.Helper()
	type event struct {
		at      time.Duration
		end     bool
		req     int
		latency time.Duration
	}
	const run = 40 * time.Second
	var evs []event
	var honest []time.Duration
	burst := 10 * time.Second / time.Duration(perSecond)
	n := 0
	for at := time.Duration(0); at < run; at += burst {
		for range 10 {
			lat := 40*time.Millisecond + time.Duration(n%17)*time.Millisecond
			honest = append(honest, lat)
			evs = append(evs, event{at: at, req: n, latency: lat}, event{at: at + lat, end: true, req: n})
			n++
		}
	}
	nHonest := n
	if attack > 0 {
		// The attacker starts 1µs before each honest burst it can, and
		// otherwise evenly.
		for at := time.Second - time.Microsecond; at < run; at += time.Second / time.Duration(attack) {
			lat := 50 * time.Microsecond
			evs = append(evs, event{at: at, req: n, latency: lat}, event{at: at + lat, end: true, req: n})
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
	l := NewLimiter(c)
	m = l.Method("/svc/Rare")
	reqs := make([]Request, n)
	admitted := make([]bool, n)
	limit = c.MaxLimit
	for _, e := range evs {
		now := t0.Add(e.at)
		settled := e.at >= 21*time.Second
		if !e.end {
			peer := uint64(1000) // the attacker's
			if e.req < nHonest {
				peer = uint64(e.req % 5)
			}
			v := l.Admit(now, m, "", peer, 0.5, &reqs[e.req])
			admitted[e.req] = v.Admitted
			if !v.Admitted && e.req < nHonest && settled {
				shed++
			}
			continue
		}
		if !admitted[e.req] {
			continue
		}
		l.End(now, &reqs[e.req], true)
		if e.req < nHonest && settled {
			ratio = max(ratio, math.Exp(l.signal))
			limit = min(limit, l.Limit())
		}
	}
	slices.Sort(honest)
	return m, honest[(len(honest)-1)/4], shed, ratio, limit
}

// A lightly used method: an attacker's cheap calls must not become its
// idle latency. Honest requests of 40 to 56ms come 10, 20, 25 or 40 a
// second from five peers; one attacker peer sends calls that take 50µs,
// from as few as the honest to many more. The baseline stays within the
// honest latencies (at least their lower quartile, less one histogram
// bucket), the Limiter does not read the honest requests as slower than
// its tolerance, and neither cuts its limit nor sheds any of them.
func TestBaselineLowRateAttack(t *testing.T) {
	for _, perSecond := range []int{10, 20, 25, 40} {
		for _, attack := range []int{0, 10, 25, 50, 200, 1000} {
			t.Run(fmt.Sprintf("honest %d/s, attacker %d/s", perSecond, attack), func(t *testing.T) {
				c := defaults()
				c.InitialLimit = 12
				m, quartile, shed, ratio, limit := lowRateRun(t, c, perSecond, attack)
				floor := time.Duration(float64(quartile) * math.Exp2(-1.0/bucketsPerOctave))
				if b := m.Baseline(); b < floor || b > 60*time.Millisecond {
					t.Errorf("baseline %v, want within the honest latencies (lower quartile %v)", b, quartile)
				}
				if ratio > c.Tolerance {
					t.Errorf("the honest requests read as up to %.3gx their idle latency, beyond the tolerance %v", ratio, c.Tolerance)
				}
				if shed != 0 || limit < c.InitialLimit {
					t.Errorf("%d honest requests shed, limit down to %d (from %d)", shed, limit, c.InitialLimit)
				}
			})
		}
	}
}
