package shed

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
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
	// where the faster quarter of requests take about
	// Tolerance / (1 − 1/√limit) times their idle latency.
	Tolerance float64
	// RetryShare bounds the retries the Shedder invites, in [0, 1): while
	// the recent requests it shed, or whose handlers failed with a sign
	// of overload, are at most RetryShare times those it served, it
	// invites a retry; beyond, it says "don't retry". Each invited retry
	// then follows a request served, and load from retries stays within
	// 1 + RetryShare of what the clients ask. 0 never invites one.
	RetryShare float64
	// Window is how far back those requests count, in [10ms, 1h].
	Window time.Duration
}

// DefaultConfig returns a limit that starts at 20 and moves within
// [1, 1000], a tolerance of 1.5 (Gradient2's), and retries invited while
// the last second's sheds and refusals are at most a tenth of the
// requests served: a retry amplification of at most 1.1x.
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

// RetryAfter returns the value of HTTP's Retry-After for p: the delay in
// whole seconds, or [StopRetryAfter] for stop. Retry-After has no
// fractions, and rounding every delay up to a second would send every
// client rejected in the same second back together, a second later. So
// the delay is rounded down or up at random, up with the chance of its
// fraction of a second, drawn from u, uniform in [0, 1): clients told
// 300ms hear "0" seven times in ten and "1" three times, 300ms on
// average. ("0" leaves the wait to the client's own backoff.)
func (p Pushback) RetryAfter(u float64) string {
	if p.Stop {
		return strconv.FormatInt(int64(StopRetryAfter/time.Second), 10)
	}
	whole, frac := math.Modf(p.Delay.Seconds())
	if u < frac {
		whole++
	}
	return strconv.FormatInt(int64(whole), 10)
}

// ErrOverloaded is the error of a request the Shedder rejected; the
// protocol's status (UNAVAILABLE, 503) wraps it.
var ErrOverloaded = errors.New("shed: server overloaded, request rejected")

// Outcome is how a request the Shedder admitted ended, which decides
// what the Shedder learns from it.
type Outcome int

// The outcomes.
const (
	// Served: the request succeeded and its client took the answer. Its
	// latency, less the time spent waiting on the client, measures the
	// server's work.
	Served Outcome = iota
	// Failed: any other end, an error, the client's deadline or
	// cancellation. Its latency says nothing of the server's work.
	Failed
	// Overloaded: the request failed because the server is overloaded
	// (its own queue or pool is full). The limit shrinks by a tenth at
	// once, as [ReportOverload] makes it.
	Overloaded
)

// Shedder admits requests up to its adaptive concurrency limit and rejects
// the rest with a pushback. It is safe for concurrent use. Use [New]; the
// zero value is not usable.
type Shedder struct {
	clock  rebound.Clock
	random rebound.Random // nil: math/rand/v2
	inst   *instruments   // nil without a MeterProvider
	seed   maphash.Seed   // hashes peers' addresses

	mu        sync.Mutex
	lim       *shedrule.Limiter
	lastLimit int
}

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
	s := &Shedder{clock: o.clock, random: o.random, seed: maphash.MakeSeed(), lastLimit: c.InitialLimit,
		lim: shedrule.NewLimiter(shedrule.Config{InitialLimit: c.InitialLimit, MinLimit: c.MinLimit, MaxLimit: c.MaxLimit,
			Tolerance: c.Tolerance, RetryShare: c.RetryShare, Window: c.Window})}
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

func (s *Shedder) float64() float64 {
	if s.random != nil {
		return s.random.Float64()
	}
	return rand.Float64()
}

// request is a request the Shedder admitted, from admission to end.
type request struct {
	s        *Shedder
	r        shedrule.Request // guarded by s.mu
	overload atomic.Bool      // ReportOverload was called
}

// requestKey is the context key of the *request a handler runs under.
type requestKey struct{}

// requestContext is a handler's context: its parent, which also answers
// requestKey with the request. Kept inside the per-request state, it
// costs no allocation of its own.
type requestContext struct {
	context.Context
	r *request
}

func (c *requestContext) Value(key any) any {
	if key == (requestKey{}) {
		return c.r
	}
	return c.Context.Value(key)
}

// ReportOverload tells the Shedder that admitted the request of ctx that
// the server is overloaded: its own queue or connection pool is full, a
// resource it alone holds is exhausted. When the request ends, whatever its
// outcome, the limit shrinks by a tenth, and its latency teaches nothing.
// It reports whether ctx belongs to a request a Shedder admitted (through
// its interceptors or Handler).
//
// A handler's failures do not shrink the limit on their own: a refusal
// aimed at one client (a quota, a missing shard) or a dependency failing
// fast says nothing of this server's capacity. Call ReportOverload only
// when the failure is this server's overload.
func ReportOverload(ctx context.Context) bool {
	r, ok := ctx.Value(requestKey{}).(*request)
	if ok {
		r.overload.Store(true)
	}
	return ok
}

// admit asks to start a request of method m, or, when m is nil, of the
// method called name, from peer.
func (s *Shedder) admit(name string, m *shedrule.Method, peer uint64, into *request) (Pushback, bool) {
	u := s.float64()
	s.mu.Lock()
	v := s.lim.Admit(s.clock.Now(), m, name, peer, u, &into.r)
	s.mu.Unlock()
	if !v.Admitted {
		s.inst.shed(v.Stop)
		return Pushback{Stop: v.Stop, Delay: v.Delay}, false
	}
	into.s = s
	s.inst.admitted()
	return Pushback{}, true
}

// gate sheds a request of method when the Shedder is at its limit,
// without admitting it otherwise.
func (s *Shedder) gate(method string) (Pushback, bool) {
	u := s.float64()
	s.mu.Lock()
	v := s.lim.Gate(s.clock.Now(), method, u)
	s.mu.Unlock()
	if v.Admitted {
		return Pushback{}, true
	}
	s.inst.shed(v.Stop)
	return Pushback{Stop: v.Stop, Delay: v.Delay}, false
}

// wait and unwait bracket a handler's wait on its client.
func (r *request) wait() {
	s := r.s
	s.mu.Lock()
	s.lim.Wait(s.clock.Now(), &r.r)
	s.mu.Unlock()
}

func (r *request) unwait() {
	s := r.s
	s.mu.Lock()
	s.lim.Unwait(s.clock.Now(), &r.r)
	s.mu.Unlock()
}

// refuse returns the pushback for r's handler's failure with a sign of
// overload that carries none of its own.
func (r *request) refuse() Pushback {
	s := r.s
	u := s.float64()
	s.mu.Lock()
	v := s.lim.Refuse(s.clock.Now(), &r.r, u)
	s.mu.Unlock()
	s.inst.refused(v.Stop)
	return Pushback{Stop: v.Stop, Delay: v.Delay}
}

// end ends r with outcome o; only the first call counts.
func (r *request) end(o Outcome) {
	s := r.s
	overload := o == Overloaded || r.overload.Load()
	s.mu.Lock()
	if r.r.Ended() {
		s.mu.Unlock()
		return
	}
	if overload {
		s.lim.Overload()
	}
	s.lim.End(s.clock.Now(), &r.r, o == Served && !overload)
	n := s.lim.Limit()
	changed := n != s.lastLimit
	s.lastLimit = n
	s.mu.Unlock()
	s.inst.finished()
	if changed {
		s.inst.setLimit(n)
	}
}

// Admit asks to start a request, for a front door of your own; the
// interceptors, [Shedder.Handler] and [Shedder.TapHandle] call it for you.
// When the request is admitted, done is not nil and must be called once
// when the request ends, with how it ended; later calls do nothing. When
// it is rejected, done is nil and pb says what to tell the client.
// Requests admitted here share one baseline latency, and their time
// waiting on their clients counts as the server's.
func (s *Shedder) Admit() (done func(Outcome), pb Pushback) {
	r := new(request)
	if pb, ok := s.admit("", nil, 0, r); !ok {
		return nil, pb
	}
	return r.end, Pushback{}
}

// peerOfAddr hashes the IP address of a peer's net.Addr, or its string.
// A client is its IPv4 address or its IPv6 /64: a host given a /64 can
// take a new address for every request, and would otherwise be as many
// peers as it likes.
func (s *Shedder) peerOfAddr(a net.Addr) uint64 {
	switch a := a.(type) {
	case nil:
		return 0
	case *net.TCPAddr:
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return s.peerOfIP(ip)
		}
	}
	return s.peerOfHost(a.String())
}

func (s *Shedder) peerOfIP(ip netip.Addr) uint64 {
	ip = ip.Unmap()
	if ip.Is4() {
		b := ip.As4()
		return maphash.Bytes(s.seed, b[:])
	}
	b := ip.As16()
	return maphash.Bytes(s.seed, b[:8])
}

// peerOfHost hashes the host of a "host:port" address: as peerOfAddr
// does when it is an IP address, and otherwise the string.
func (s *Shedder) peerOfHost(addr string) uint64 {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	if ip, err := netip.ParseAddr(addr); err == nil {
		return s.peerOfIP(ip)
	}
	return maphash.String(s.seed, addr)
}

// Stats is a snapshot of a Shedder.
type Stats struct {
	// Limit is the current concurrency limit; InFlight the requests being
	// served, less those waiting on their clients.
	Limit, InFlight int
	// Admitted counts the requests admitted; ShedRetry those rejected with
	// a retry delay; ShedStop those rejected with "don't retry".
	Admitted, ShedRetry, ShedStop int64
	// Refused counts the admitted requests whose handlers failed with a
	// sign of overload and no pushback of their own, to which the Shedder
	// gave one.
	Refused int64
}

// Stats returns a snapshot of s's limit and counts.
func (s *Shedder) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lim
	return Stats{Limit: l.Limit(), InFlight: l.InFlight(), Admitted: l.Admitted, ShedRetry: l.ShedRetry, ShedStop: l.ShedStop, Refused: l.Refused}
}
