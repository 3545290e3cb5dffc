// Package shed protects a server from more work than it can do, and tells
// retrying clients when to come back.
//
// A [Shedder] holds an adaptive concurrency limit. A request that finds
// the limit reached is rejected at once, before it costs the server
// anything, with UNAVAILABLE (HTTP 503) and a pushback: gRPC's
// grpc-retry-pushback-ms (gRFC A6), which grpcretry and connectretry obey,
// or HTTP's Retry-After. The pushback comes from the server's own state:
// while it sheds only a small share of its requests ([Config.RetryShare]),
// it invites a retry after the time a request takes plus the time needed to
// work off the retries it has already invited; when it sheds more, the
// retries could not all be served, and it says "don't retry" (a negative
// pushback). Load from retries then stays within 1/(1 − RetryShare) of what
// the clients ask, however many clients there are: a client's own retry
// budget sees only its own thin slice of the traffic, while the server sees
// all of it.
//
// The limit follows latency, as Netflix's concurrency-limits (Gradient2)
// and Envoy's adaptive concurrency filter do: while requests take about as
// long as they do on an idle server, it grows; when they take longer than
// [Config.Tolerance] times that, requests are queueing somewhere inside
// the server, and it shrinks toward what the server handles without
// queueing. The idle latency is the fastest of the last 10 to 20 seconds,
// as Envoy measures its minimum round trip: a long-run average, as
// Gradient2 keeps, drifts up under a sustained overload and ends by taking
// the queueing for normal. A handler that fails with a sign of overload
// (UNAVAILABLE or RESOURCE_EXHAUSTED, HTTP 429 or 503) shrinks it at once.
//
// The same Shedder serves grpc-go ([Shedder.UnaryServerInterceptor],
// [Shedder.StreamServerInterceptor]), connect-go
// ([Shedder.ConnectInterceptor]) and net/http ([Shedder.Handler]); one
// Shedder per server (or per resource the handlers share) lets them share
// one limit. Its metrics are OpenTelemetry instruments ([WithMeterProvider]).
package shed

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/shedrule"
)

// Config sets a [Shedder]. Start from [DefaultConfig].
type Config struct {
	// InitialLimit is the concurrency limit at the start, in [MinLimit,
	// MaxLimit].
	InitialLimit int
	// MinLimit and MaxLimit bound the limit: 1 <= MinLimit <= MaxLimit
	// <= 1,000,000. Equal, they fix it.
	MinLimit, MaxLimit int
	// Tolerance is how much slower than on an idle server requests may
	// get before the limit shrinks, > 1 and at most 100. The limit settles
	// where requests take about Tolerance / (1 − 1/√limit) times their
	// idle latency.
	Tolerance float64
	// RetryShare is the share of recent requests the Shedder may shed and
	// still invite retries, in [0, 1). Beyond it, it says "don't retry".
	// 0 never invites one.
	RetryShare float64
	// Window is how far back the shed share counts, in [10ms, 1h].
	Window time.Duration
}

// DefaultConfig returns a limit that starts at 20 and moves within
// [1, 1000], a tolerance of 1.5 (Gradient2's), and retries invited while
// at most a tenth of the last second's requests were shed: a retry
// amplification of at most 1.1x.
func DefaultConfig() Config {
	return Config{InitialLimit: 20, MinLimit: 1, MaxLimit: 1000, Tolerance: 1.5, RetryShare: 0.1, Window: time.Second}
}

func (c Config) validate() error {
	switch {
	case c.MinLimit < 1 || c.MinLimit > 1e6:
		return fmt.Errorf("shed: Config.MinLimit must be in [1, 1000000], got %d", c.MinLimit)
	case c.MaxLimit < c.MinLimit || c.MaxLimit > 1e6:
		return fmt.Errorf("shed: Config.MaxLimit must be in [MinLimit %d, 1000000], got %d", c.MinLimit, c.MaxLimit)
	case c.InitialLimit < c.MinLimit || c.InitialLimit > c.MaxLimit:
		return fmt.Errorf("shed: Config.InitialLimit must be in [%d, %d], got %d", c.MinLimit, c.MaxLimit, c.InitialLimit)
	case !(c.Tolerance > 1 && c.Tolerance <= 100):
		return fmt.Errorf("shed: Config.Tolerance must be in (1, 100], got %v", c.Tolerance)
	case !(c.RetryShare >= 0 && c.RetryShare < 1):
		return fmt.Errorf("shed: Config.RetryShare must be in [0, 1), got %v", c.RetryShare)
	case c.Window < 10*time.Millisecond || c.Window > time.Hour:
		return fmt.Errorf("shed: Config.Window must be in [10ms, 1h], got %v", c.Window)
	}
	return nil
}

// Pushback is what a rejected request is told.
type Pushback struct {
	// Stop says not to retry at all: the server is far over its limit.
	Stop bool
	// Delay is when to retry, when Stop is false.
	Delay time.Duration
}

// Millis returns the value of gRPC's grpc-retry-pushback-ms: the delay in
// whole milliseconds, or "-1" for stop.
func (p Pushback) Millis() string {
	if p.Stop {
		return "-1"
	}
	return strconv.FormatInt(p.Delay.Milliseconds(), 10)
}

// StopRetryAfter is the Retry-After that [Shedder.Handler] sends when it
// says "don't retry": HTTP has no word for that, so it asks for a pause
// longer than httpretry waits by default (60s), which ends httpretry's
// retries at once, while a client that does wait comes back once the
// overload has long been measured anew.
const StopRetryAfter = 120 * time.Second

// RetryAfter returns the value of HTTP's Retry-After: the delay in whole
// seconds, rounded up (at least 1), or [StopRetryAfter] for stop.
func (p Pushback) RetryAfter() string {
	d := p.Delay
	if p.Stop {
		d = StopRetryAfter
	}
	return strconv.FormatInt(max(int64(math.Ceil(d.Seconds())), 1), 10)
}

// ErrOverloaded is the error of a request the Shedder rejected; the
// protocol's status (UNAVAILABLE, 503) wraps it.
var ErrOverloaded = errors.New("shed: server overloaded, request rejected")

// Shedder admits requests up to its adaptive concurrency limit and rejects
// the rest with a pushback. It is safe for concurrent use. Use [New]; the
// zero value is not usable.
type Shedder struct {
	cfg    Config
	clock  rebound.Clock
	random rebound.Random
	inst   *instruments // nil without a MeterProvider

	mu         sync.Mutex
	limit      float64
	inFlight   int
	short      float64   // recent latency, seconds (EWMA)
	idle       float64   // fastest latency of the current baseline period, seconds; 0 for none
	prevIdle   float64   // the same of the period before
	idleSince  time.Time // when the current baseline period began
	samples    int
	window     *shedrule.Window
	admitted   int64
	shedDelay  int64
	shedStop   int64
	lastLimitN int
}

// Smoothing of the latency averages and of the limit, as Gradient2's.
const (
	shortAlpha = 0.1
	limitAlpha = 0.2
)

// baselinePeriod is how long the fastest latency counts as the idle one:
// the baseline is the fastest of the current period and the one before.
const baselinePeriod = 10 * time.Second

// New returns a Shedder, or an error naming the first invalid field of c or
// the first invalid option.
func New(c Config, opts ...Option) (*Shedder, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	var o settings
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("shed: nil Option")
		}
		opt.apply(&o)
	}
	if o.err != nil {
		return nil, o.err
	}
	s := &Shedder{cfg: c, clock: o.clock, random: o.random, limit: float64(c.InitialLimit), window: shedrule.NewWindow(c.Window), lastLimitN: c.InitialLimit}
	if s.clock == nil {
		s.clock = rebound.RealClock()
	}
	if o.mp != nil {
		in, err := newInstruments(o.mp)
		if err != nil {
			return nil, fmt.Errorf("shed: WithMeterProvider: %w", err)
		}
		s.inst = in
		s.inst.setLimit(c.InitialLimit)
	}
	return s, nil
}

// Admit asks to start a request. When it is admitted, done is not nil and
// must be called once when the request ends, with overloaded saying
// whether it failed with a sign of overload. When it is rejected, done is
// nil and pb says what to tell the client. The interceptors and Handler
// call Admit for you.
func (s *Shedder) Admit() (done func(overloaded bool), pb Pushback) {
	s.mu.Lock()
	now := s.clock.Now()
	if s.inFlight >= int(s.limit) {
		share, perSecond := s.window.Shed(now)
		u := 0.5
		if s.random != nil {
			u = s.random.Float64()
		} else {
			u = rand.Float64()
		}
		pb.Delay, pb.Stop = shedrule.Pushback(share, s.cfg.RetryShare, perSecond, time.Duration(s.short*float64(time.Second)), int(s.limit), u)
		if pb.Stop {
			s.shedStop++
		} else {
			s.shedDelay++
		}
		s.mu.Unlock()
		s.inst.shed(pb.Stop)
		return nil, pb
	}
	s.window.Admit(now)
	s.inFlight++
	s.admitted++
	atStart := s.inFlight
	s.mu.Unlock()
	s.inst.admitted()
	var once sync.Once
	return func(overloaded bool) {
		once.Do(func() { s.done(now, atStart, overloaded) })
	}, Pushback{}
}

// done ends a request admitted at start with atStart requests in flight.
func (s *Shedder) done(start time.Time, atStart int, overloaded bool) {
	s.mu.Lock()
	s.inFlight--
	if overloaded {
		// Gradient2 reacts to a drop as AIMD does: at once.
		s.limit = max(float64(s.cfg.MinLimit), s.limit*0.9)
	} else {
		now := s.clock.Now()
		s.sample(now, now.Sub(start).Seconds(), atStart)
	}
	n := int(s.limit)
	changed := n != s.lastLimitN
	s.lastLimitN = n
	s.mu.Unlock()
	s.inst.finished()
	if changed {
		s.inst.setLimit(n)
	}
}

// sample updates the latency figures and the limit with the latency of
// a request that ended at now, Gradient2's way against an idle baseline.
func (s *Shedder) sample(now time.Time, rtt float64, atStart int) {
	rtt = max(rtt, 1e-6)
	s.samples++
	if s.samples == 1 {
		s.short = rtt
		s.idleSince = now
	} else {
		s.short += shortAlpha * (rtt - s.short)
	}
	if age := now.Sub(s.idleSince); age >= baselinePeriod {
		s.prevIdle, s.idle, s.idleSince = s.idle, 0, now
		if age >= 2*baselinePeriod {
			// The period before ended long ago: it is no baseline.
			s.prevIdle = 0
		}
	}
	if s.idle == 0 || rtt < s.idle {
		s.idle = rtt
	}
	base := s.idle
	if s.prevIdle > 0 {
		base = min(base, s.prevIdle)
	}
	if float64(atStart) < s.limit/2 {
		// The server was not busy: this sample says nothing about the
		// limit.
		return
	}
	gradient := max(0.5, min(1, s.cfg.Tolerance*base/s.short))
	next := s.limit*gradient + math.Sqrt(s.limit)
	s.limit = min(float64(s.cfg.MaxLimit), max(float64(s.cfg.MinLimit), (1-limitAlpha)*s.limit+limitAlpha*next))
}

// Stats is a snapshot of a Shedder.
type Stats struct {
	// Limit is the current concurrency limit; InFlight the requests being
	// served.
	Limit, InFlight int
	// Admitted counts the requests admitted; ShedRetry those rejected with
	// a retry delay; ShedStop those rejected with "don't retry".
	Admitted, ShedRetry, ShedStop int64
}

// Stats returns a snapshot of s's limit and counts.
func (s *Shedder) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Limit: int(s.limit), InFlight: s.inFlight, Admitted: s.admitted, ShedRetry: s.shedDelay, ShedStop: s.shedStop}
}
