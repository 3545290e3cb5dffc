// Package shedrule holds the rules of package shed on an explicit clock:
// which requests a server admits, what it tells those it rejects and the
// failures it speaks for, and how its concurrency limit follows the
// latency of its work. Package shed runs a [Limiter] behind a lock on the
// real clock; the simulation (internal/sim) can run the same Limiter on
// virtual time.
package shedrule

import (
	"math"
	"time"
)

// slots is the number of steps a Window moves in.
const slots = 10

// Window counts the admitted, shed and refused requests of a sliding
// window: shed, rejected before they started; refused, admitted but
// failed by their handler with a sign of overload that the server speaks
// for; served, the others admitted. It is not safe for concurrent use: its owner locks. The zero value
// is not usable; use [NewWindow].
type Window struct {
	width                  int64 // nanoseconds per slot
	head                   int64
	started                bool
	admitted, shed, refuse [slots]int64
	sumAdmit, sumShed      int64
	sumRefuse              int64
}

// NewWindow returns an empty window of length d (> 0).
func NewWindow(d time.Duration) *Window {
	return &Window{width: max(int64(d/slots), 1)}
}

func (w *Window) slot(now time.Time) int {
	id := now.UnixNano() / w.width
	switch {
	case !w.started:
		w.started, w.head = true, id
	case id <= w.head:
	case id-w.head >= slots:
		*w = Window{width: w.width, started: true, head: id}
	default:
		for w.head < id {
			w.head++
			i := int(((w.head % slots) + slots) % slots)
			w.sumAdmit -= w.admitted[i]
			w.sumShed -= w.shed[i]
			w.sumRefuse -= w.refuse[i]
			w.admitted[i], w.shed[i], w.refuse[i] = 0, 0, 0
		}
	}
	return int(((w.head % slots) + slots) % slots)
}

// Admit counts an admitted request at now.
func (w *Window) Admit(now time.Time) {
	i := w.slot(now)
	w.admitted[i]++
	w.sumAdmit++
}

// Shed counts a shed request at now and returns the ratio of the
// window's requests shed or refused, this one included, to the others,
// those served (+Inf when none was), and those shed or refused per second
// over the window.
func (w *Window) Shed(now time.Time) (ratio, perSecond float64) {
	i := w.slot(now)
	w.shed[i]++
	w.sumShed++
	return w.ratio()
}

// Refuse counts an admitted request refused at now, as [Window.Shed]
// counts a shed one, and returns the same figures.
func (w *Window) Refuse(now time.Time) (ratio, perSecond float64) {
	i := w.slot(now)
	w.refuse[i]++
	w.sumRefuse++
	return w.ratio()
}

func (w *Window) ratio() (ratio, perSecond float64) {
	bad := w.sumShed + w.sumRefuse
	ratio = math.Inf(1)
	if good := w.sumAdmit - w.sumRefuse; good > 0 {
		ratio = float64(bad) / float64(good)
	}
	perSecond = float64(bad) / (time.Duration(w.width * slots)).Seconds()
	return ratio, perSecond
}

// MaxDelay caps the pushback delay.
const MaxDelay = time.Minute

// Pushback is what a shed or refused request is told: stop when the
// recent requests shed or refused, ratio of the others, are more than
// retryShare (the retries could not all be served, so none is invited:
// each invited retry follows a request that was served, and the load
// stays within 1 + retryShare of what clients ask); otherwise a delay
// for the retry.
// The delay is the time one request takes plus the time the server needs
// to work off the retries it has already invited, at limit requests in
// flight, each taking latency: perSecond × latency² / limit. u, uniform in
// [0, 1), spreads it over [d/2, 3d/2) so that the invited retries do not
// come back together. It is at least 1ms and at most MaxDelay.
func Pushback(ratio, retryShare, perSecond float64, latency time.Duration, limit int, u float64) (delay time.Duration, stop bool) {
	if !(ratio <= retryShare) {
		return 0, true
	}
	lat := latency.Seconds()
	d := lat + perSecond*lat*lat/float64(max(limit, 1))
	d *= 0.5 + u
	delay = time.Duration(d * float64(time.Second))
	return min(max(delay, time.Millisecond), MaxDelay), false
}
