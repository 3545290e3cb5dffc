package shedrule

import (
	"math"
	"slices"
	"time"
)

// The latency histogram of an interval: bucketsPerOctave buckets per
// doubling from minLatency, numBuckets in all (1µs to about 134s); a
// sample beyond either end counts in the end bucket.
const (
	bucketsPerOctave = 8
	numBuckets       = 27 * bucketsPerOctave
	minLatency       = 1e-6 // seconds
)

// Baseline intervals: an interval closes once it is interval old and
// holds minSamples; the baseline is the lower quartile of the medians of
// the intervals that closed within horizon (of the shared ones alone, when
// there are any: see below). An interval that reaches horizon with fewer
// samples is dropped.
const (
	interval   = time.Second
	horizon    = 20 * time.Second
	minSamples = 8
	maxSamples = math.MaxUint16 // per interval; beyond, samples are not recorded
	intervals  = int(horizon / interval)
)

// Each peer may add peerAllowance samples to an interval, plus one for
// every peerShare the interval holds. Peers hash into peerSlots counters;
// those that share one share their allowance.
//
// Beside other peers a peer may hold less: while three or more add to an
// interval, each may add a sample only while it holds at most half as many
// as all the others together (a third of the interval, and one more); and
// for crowdGrace after an interval that two or more added to, at most as
// many as all the others together, so that a peer that comes first in an
// interval takes no more than the others bring. A peer alone for
// crowdGrace is alone again: it teaches the baseline by itself.
//
// An interval shared so, under those caps from its start (it followed one
// that two or more added to) and added to by three or more, outweighs
// those of a peer alone or of two: while one is within horizon, the
// baseline is the lower quartile of such intervals' medians alone, so that
// a peer that had an idle method to itself does not keep its baseline
// once others come. (Not two: one visitor beside a lone peer would then
// hold the baseline to an interval or two for a horizon.)
const (
	peerSlots     = 64
	peerAllowance = 16
	peerShare     = 8
	crowdGrace    = 5 * interval
)

// Method is the latency record of one method of a server: the
// histogram of its current interval and the medians of its past ones.
type Method struct {
	hist   [numBuckets]uint16
	n      int       // samples in hist
	begun  time.Time // when the current interval began; zero before any
	peers  [peerSlots]uint16
	active int                // peers' slots that added to the current interval
	crowd  bool               // two or more added to the last closed interval
	meds   [intervals]float64 // medians of closed intervals, seconds; 0 = none
	ends   [intervals]time.Time
	shared [intervals]bool // whether each was shared under the caps
	next   int             // where the next closed interval goes in meds
	expiry time.Time       // when the oldest median in meds leaves the horizon
	check  int             // before any interval closed: n at which to recompute

	base float64 // the baseline, seconds; 0 for none
	typ  float64 // the latest interval's median, seconds; 0 for none
}

func bucket(s float64) int {
	i := int(math.Floor(math.Log2(s/minLatency) * bucketsPerOctave))
	return max(0, min(numBuckets-1, i))
}

// value is the middle of bucket i, in seconds.
func value(i int) float64 { return minLatency * math.Exp2((float64(i)+0.5)/bucketsPerOctave) }

// add records a latency of s seconds that ended at now, from peer.
func (m *Method) add(now time.Time, s float64, peer uint64) {
	age := now.Sub(m.begun)
	switch {
	case m.begun.IsZero():
		m.begun = now
	case age >= interval && m.n >= minSamples:
		m.close(now)
	case age >= horizon:
		// Idle for a horizon: no other peer is about.
		m.reset(now)
		m.crowd = false
	}
	if !m.expiry.IsZero() && !now.Before(m.expiry) {
		m.recompute(now)
	}
	p := &m.peers[peer%peerSlots]
	c := int(*p)
	if c > peerAllowance+m.n/peerShare || m.n >= maxSamples {
		return
	}
	others := m.n - c
	switch {
	case m.active >= 3 && 2*c > others:
		return
	case m.crowd && c > others && now.Sub(m.begun) < crowdGrace:
		return
	}
	if c == 0 {
		m.active++
	}
	*p++
	m.hist[bucket(s)]++
	m.n++
	if m.base == 0 || m.check > 0 && m.n >= m.check {
		// Before the first interval closes, the current one is the
		// baseline, recomputed as it doubles.
		if m.n >= minSamples && m.ends[(m.next+intervals-1)%intervals].IsZero() {
			med := m.median()
			m.base, m.typ, m.check = med, med, 2*m.n
		}
	}
}

// median is the current interval's median.
func (m *Method) median() float64 {
	half, seen := (m.n+1)/2, 0
	for i, c := range m.hist {
		seen += int(c)
		if seen >= half {
			return value(i)
		}
	}
	return value(numBuckets - 1)
}

func (m *Method) reset(now time.Time) {
	m.hist, m.peers, m.n, m.begun, m.check = [numBuckets]uint16{}, [peerSlots]uint16{}, 0, now, 0
	m.active = 0
}

// close ends the current interval at now.
func (m *Method) close(now time.Time) {
	med := m.median()
	m.meds[m.next], m.ends[m.next] = med, now
	m.shared[m.next] = m.crowd && m.active >= 3
	m.next = (m.next + 1) % intervals
	m.typ = med
	m.crowd = m.active >= 2
	m.reset(now)
	m.recompute(now)
}

// recompute sets the baseline from the medians within the horizon.
func (m *Method) recompute(now time.Time) {
	var buf, sbuf [intervals]float64
	meds, shared := buf[:0], sbuf[:0]
	m.expiry = time.Time{}
	for i, e := range m.ends {
		if e.IsZero() {
			continue
		}
		if now.Sub(e) >= horizon {
			m.meds[i], m.ends[i], m.shared[i] = 0, time.Time{}, false
			continue
		}
		meds = append(meds, m.meds[i])
		if m.shared[i] {
			shared = append(shared, m.meds[i])
		}
		if x := e.Add(horizon); m.expiry.IsZero() || x.Before(m.expiry) {
			m.expiry = x
		}
	}
	if len(meds) == 0 {
		// All aged out: the current interval starts again as the
		// baseline once it has enough samples.
		m.base, m.check = 0, minSamples
		return
	}
	if len(shared) > 0 {
		meds = shared
	}
	slices.Sort(meds)
	m.base = meds[(len(meds)-1)/4]
}

// typical is the latency of a request of m, for pushback: the median of
// its latest interval, or, before any interval closed, of the current
// one; 0 when it has none.
func (m *Method) typical() time.Duration { return seconds(m.typ) }
