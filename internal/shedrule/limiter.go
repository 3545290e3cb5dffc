package shedrule

import (
	"math"
	"time"
)

// Config is the settings of a [Limiter], as shed.Config has them; package
// shed validates them.
type Config struct {
	InitialLimit, MinLimit, MaxLimit int
	Tolerance, RetryShare            float64
	Window                           time.Duration
}

// Verdict is what a request asking to start is told.
type Verdict struct {
	// Admitted says it may start.
	Admitted bool
	// Stop, for a request not admitted, says not to retry; otherwise
	// Delay is when to.
	Stop  bool
	Delay time.Duration
}

// Limiter admits requests up to its concurrency limit and moves the limit
// with the latency of the requests it served, against the latency of the
// same method on a server that is not queueing.
//
// What teaches it: only requests that were served, ended successfully and
// whole (not by their client's deadline or cancellation), tell it the
// server's latency; a failure says nothing of it, however fast or slow.
// Time a request spends waiting on its client (between [Limiter.Wait]
// and [Limiter.Unwait]) neither counts as latency nor holds a slot.
//
// The idle latency of a method, its baseline, is robust: the median of
// each interval of at least a second (and of at least 8 samples), and the
// lower quartile of those medians over the last 20 seconds. In each
// interval a peer may add at most 16 samples plus an eighth of the
// interval's samples, and, beside two or more other peers, at most half
// as many as they do together (from the interval's start, when the one
// before had other peers in it), so that a single request cannot move
// the baseline and a single client among several, however many cheap
// calls it makes and whenever it makes them, holds at most about a third
// of an interval's samples and cannot carry its median. While intervals
// that three or more peers shared so are within the 20 seconds, the
// baseline is theirs alone, so that a client that had a method to itself
// does not keep the baseline it taught once others come. A single peer
// teaches the baseline by itself. Each method (up to MaxMethods) has a
// baseline of its own, so that a cheap method does not make a heavy one
// look queued.
//
// A Limiter is not safe for concurrent use: its owner locks. The zero
// value is not usable; use [NewLimiter].
type Limiter struct {
	cfg      Config
	limit    float64
	inFlight int
	window   *Window
	// signal is a moving average of log(latency / baseline) over the
	// requests served: how much slower than idle the server is now.
	signal    float64
	hasSignal bool
	// roundLimit is the limit at roundStart; within an idle latency of
	// it, the limit stays above half of it.
	roundStart time.Time
	roundLimit float64
	methods    map[string]*Method
	nmethods   int
	other      *Method // the methods beyond MaxMethods
	pending    *Method // the methods that have served no request yet
	def        *Method

	// Counts, for Stats.
	Admitted, ShedRetry, ShedStop, Refused int64
}

// MaxMethods bounds the methods a Limiter keeps a baseline for; those
// beyond share one.
const MaxMethods = 256

// NewLimiter returns a Limiter with the settings of c, which must be
// valid.
func NewLimiter(c Config) *Limiter {
	return &Limiter{cfg: c, limit: float64(c.InitialLimit), window: NewWindow(c.Window),
		methods: map[string]*Method{}, other: &Method{}, pending: &Method{}, def: &Method{}}
}

// Limit is the current concurrency limit; InFlight the requests served
// that are not waiting on their client.
func (l *Limiter) Limit() int    { return int(l.limit) }
func (l *Limiter) InFlight() int { return l.inFlight }

// Method returns the method called name, made on first use; "" is the
// default method. Beyond MaxMethods names, every new one shares a method.
// [Limiter.Admit] makes a method only once a request of it was served, so
// that requests for methods that do not exist make none.
func (l *Limiter) Method(name string) *Method {
	if name == "" {
		return l.def
	}
	if m, ok := l.methods[name]; ok {
		return m
	}
	if l.nmethods >= MaxMethods {
		return l.other
	}
	m := &Method{}
	l.methods[name] = m
	l.nmethods++
	return m
}

// NewMethod returns a method of its own, with no name (or, beyond
// MaxMethods, the shared one).
func (l *Limiter) NewMethod() *Method {
	if l.nmethods >= MaxMethods {
		return l.other
	}
	l.nmethods++
	return &Method{}
}

// Request is the state of a request a Limiter admitted. Its zero value is
// ready for [Limiter.Admit].
type Request struct {
	method *Method
	name   string // of a method that had no record yet
	start  time.Time
	peer   uint64
	// waited is the time spent waiting on the client, less, while a wait
	// lasts, its start's offset from start.
	waited  time.Duration
	atStart int32
	waiting int32 // calls waiting on the client under way
	ended   bool
}

// Ended reports whether r has ended.
func (r *Request) Ended() bool { return r.ended }

// lookup returns the method called name if it has a record, and
// otherwise the one that methods without a record share.
func (l *Limiter) lookup(name string) *Method {
	if name == "" {
		return l.def
	}
	if m, ok := l.methods[name]; ok {
		return m
	}
	return l.pending
}

// Admit asks to start a request of m, or, when m is nil, of the method
// called name, from peer (a hash of the client's address; any fixed value
// when unknown) at now. Admitted, r holds the request until
// [Limiter.End]; otherwise the verdict says what to tell the client, its
// delay spread by u, uniform in [0, 1).
func (l *Limiter) Admit(now time.Time, m *Method, name string, peer uint64, u float64, r *Request) Verdict {
	if m == nil {
		m = l.lookup(name)
	}
	if l.inFlight >= int(l.limit) {
		return l.shed(now, m, u)
	}
	l.window.Admit(now)
	l.inFlight++
	l.Admitted++
	*r = Request{method: m, start: now, atStart: int32(min(l.inFlight, math.MaxInt32)), peer: peer}
	if m == l.pending {
		r.name = name
	}
	return Verdict{Admitted: true}
}

// Gate sheds a request of the method called name at now, as Admit would,
// when the server is at its limit, and otherwise lets it pass without
// admitting it: a request that passes asks Admit later, once it has been
// read.
func (l *Limiter) Gate(now time.Time, name string, u float64) Verdict {
	if l.inFlight >= int(l.limit) {
		return l.shed(now, l.lookup(name), u)
	}
	return Verdict{Admitted: true}
}

func (l *Limiter) shed(now time.Time, m *Method, u float64) Verdict {
	ratio, perSecond := l.window.Shed(now)
	delay, stop := Pushback(ratio, l.cfg.RetryShare, perSecond, m.typical(), int(l.limit), u)
	if stop {
		l.ShedStop++
	} else {
		l.ShedRetry++
	}
	return Verdict{Stop: stop, Delay: delay}
}

// Refuse counts r, which its handler failed at now with a sign of
// overload that carried no pushback of its own, among the window's
// rejections, and returns the pushback to tell its client, by the rule
// for shed requests.
func (l *Limiter) Refuse(now time.Time, r *Request, u float64) Verdict {
	ratio, perSecond := l.window.Refuse(now)
	l.Refused++
	delay, stop := Pushback(ratio, l.cfg.RetryShare, perSecond, r.method.typical(), int(l.limit), u)
	return Verdict{Stop: stop, Delay: delay}
}

// Wait says r's handler starts waiting on its client at now: to read a
// message that has not come, to write to a client that does not read.
// While any of its waits lasts, r holds no slot and its time is not
// latency. Waits may overlap; each must be matched by one Unwait.
func (l *Limiter) Wait(now time.Time, r *Request) {
	if r.ended {
		return
	}
	if r.waiting == 0 {
		l.inFlight--
		r.waited -= now.Sub(r.start)
	}
	r.waiting++
}

// Unwait ends a wait begun by Wait. r takes its slot back even when the
// server is at its limit: its work has begun.
func (l *Limiter) Unwait(now time.Time, r *Request) {
	if r.ended || r.waiting == 0 {
		return
	}
	r.waiting--
	if r.waiting == 0 {
		l.inFlight++
		r.waited += now.Sub(r.start)
	}
}

// Overload shrinks the limit by a tenth at once, as AIMD does on a drop:
// the server's handler knows it is overloaded.
func (l *Limiter) Overload() {
	l.limit = max(float64(l.cfg.MinLimit), l.limit*0.9)
}

// Smoothing of the latency signal and of the limit. The signal rises by
// signalUp of the way to a slower request's ratio, as Gradient2's short
// average, and falls by signalDown toward a faster one's: it tracks the
// lower quartile of recent ratios rather than their mean, so that the
// limit grows back as soon as requests take their usual time again, and
// a few slow requests among many do not read as queueing.
const (
	signalUp   = 0.1
	signalDown = 0.3
	limitAlpha = 0.2
)

// End ends r at now. served says it ended successfully and whole, so
// that its latency, less its waits on the client, measures the server's
// work. Ending r again does nothing.
func (l *Limiter) End(now time.Time, r *Request, served bool) {
	if r.ended {
		return
	}
	r.ended = true
	if r.waiting > 0 {
		r.waited += now.Sub(r.start)
	} else {
		l.inFlight--
	}
	if !served {
		return
	}
	rtt := max((now.Sub(r.start) - r.waited).Seconds(), 1e-6)
	m := r.method
	if m == l.pending {
		m = l.Method(r.name)
	}
	m.add(now, rtt, r.peer)
	base := m.base
	if base == 0 {
		return
	}
	// One request moves the signal by at most signalUp × the log of
	// 4 × Tolerance.
	bound := math.Log(4 * l.cfg.Tolerance)
	x := max(-bound, min(bound, math.Log(rtt/base)))
	switch {
	case !l.hasSignal:
		l.signal, l.hasSignal = x, true
	case x > l.signal:
		l.signal += signalUp * (x - l.signal)
	default:
		l.signal += signalDown * (x - l.signal)
	}
	if float64(r.atStart) < l.limit/2 {
		// The server was not busy: this request says nothing of the
		// limit.
		return
	}
	// Gradient2: shrink toward the limit at which requests take
	// Tolerance times their idle latency; grow by √limit, the queue
	// it allows.
	gradient := max(0.5, min(1, l.cfg.Tolerance/math.Exp(l.signal)))
	next := l.limit*gradient + math.Sqrt(l.limit)
	next = (1-limitAlpha)*l.limit + limitAlpha*next
	// Within one idle latency the limit at most halves, however many
	// requests end in it: requests that were held together (a
	// dependency hung, then came back) end together, and tell of one
	// event, not of many.
	if now.Sub(l.roundStart) >= seconds(base) {
		l.roundStart, l.roundLimit = now, l.limit
	}
	next = max(next, l.roundLimit/2)
	l.limit = min(float64(l.cfg.MaxLimit), max(float64(l.cfg.MinLimit), next))
}

// Baseline is the idle latency of m, 0 before it has one.
func (m *Method) Baseline() time.Duration { return seconds(m.base) }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
