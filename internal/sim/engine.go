package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rebound-go/rebound"
)

// refusalDelay is how long a refused attempt takes to reach its client: a
// fast UNAVAILABLE, far quicker than a served attempt.
const refusalDelay = time.Millisecond

// Streams of the seeded PCG generator, so that the arrivals do not depend
// on how much jitter a policy draws.
const (
	streamArrivals = 1
	streamJitter   = 2
)

// epoch is virtual time 0 on the clock the strategies read.
var epoch = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

var (
	// errRefused is the server's answer to an attempt it does not serve.
	errRefused = rebound.Retryable(errors.New("unavailable"))
	// errUnexpected means a strategy did what none of rebound's does.
	errUnexpected = errors.New("sim: strategy misbehaved")
)

// arrival is a new request of a client.
type arrival struct {
	at     time.Duration
	client int32
}

// arrivals draws the new requests of all clients, in time order. The merged
// Poisson processes of the clients are one Poisson process of the summed
// rate whose requests each belong to a uniformly chosen client.
func arrivals(c Config) []arrival {
	rng := rand.New(rand.NewPCG(c.Seed, streamArrivals))
	rate := float64(c.Clients) * c.Rate
	end := c.Duration.Seconds()
	out := make([]arrival, 0, int(rate*end*1.01)+16)
	// Validate bounds rate*end, so t grows by far more than its rounding
	// error at each step and the loop ends.
	for t := rng.ExpFloat64() / rate; t < end; t += rng.ExpFloat64() / rate {
		out = append(out, arrival{at: time.Duration(t * float64(time.Second)), client: int32(rng.IntN(c.Clients))})
	}
	return out
}

// request is the retry state of the request of the arrival with the same
// index.
type request struct {
	tok rebound.Token
}

type eventKind uint8

const (
	// sendAttempt: a retry's delay has passed; the attempt is sent.
	sendAttempt eventKind = iota
	// answer: an attempt's answer reaches its client.
	answer
)

// event is what happens when a [timed] event falls due.
type event struct {
	kind eventKind
	ok   bool  // for answer: the attempt succeeded
	req  int32 // index in engine.arr and engine.reqs
	// pushback is the shedder's answer to a refused attempt: 0 for none,
	// a delay, or -1 for stop.
	pushback time.Duration
}

// virtualClock is the simulation's time as a [rebound.Clock]. The
// strategies read it to compare a retry's start with its request's
// deadline. The engine never waits on a timer, because it schedules the
// next attempt as an event instead of calling [rebound.Do]; a timer made
// here has therefore already fired, at the virtual time it was due. Like
// the engine, it is used from one goroutine.
type virtualClock struct{ e *engine }

func (c virtualClock) Now() time.Time { return epoch.Add(c.e.now) }

func (c virtualClock) NewTimer(d time.Duration) rebound.Timer {
	t := make(firedTimer, 1)
	t <- c.Now().Add(d)
	return t
}

type firedTimer chan time.Time

func (t firedTimer) C() <-chan time.Time { return t }
func (t firedTimer) Stop() bool          { return false }

// deadlineCtx carries a request's deadline in virtual time. The strategies
// only compare its Deadline with the virtual clock; it is never cancelled,
// since virtual time does not pass on the real clock.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// engine simulates one policy. It is not safe for concurrent use.
type engine struct {
	c         Config
	arr       []arrival
	reqs      []request // the requests of arr[:next]
	next      int       // index in arr of the next arrival
	now       time.Duration
	queue     eventQueue
	seq       uint64
	clients   []rebound.Strategy
	calls     []rebound.CallBudget // by client, budgets that count requests; nil unless Ratio or Concurrency
	workers   int                  // serving when healthy
	degraded  int                  // serving during the outage
	busy      int
	outageEnd time.Duration
	interval  time.Duration
	offered   []int // attempts sent per interval
	events    int
	maxEvents int
	deadline  deadlineCtx
	fleet     fleet

	res                           Result
	latencies                     []time.Duration
	succeededInRun, succeededLate int
}

func newEngine(c Config, p Policy, arr []arrival, interval time.Duration, maxEvents int) (*engine, error) {
	e := &engine{
		c:         c,
		arr:       arr,
		reqs:      make([]request, len(arr)),
		workers:   c.Workers(),
		outageEnd: c.OutageStart + c.OutageLength,
		interval:  interval,
		offered:   make([]int, (c.Duration+interval-1)/interval),
		maxEvents: maxEvents,
		res:       Result{Policy: p},
		deadline:  deadlineCtx{Context: context.Background()},
	}
	e.degraded = int(float64(e.workers) * c.OutageCapacity)
	f, err := newFleet(c, p)
	if err != nil {
		return nil, fmt.Errorf("sim: %v: %w", p, err)
	}
	e.fleet = f
	jitter := rand.New(rand.NewPCG(c.Seed, streamJitter))
	opts := []rebound.Option{rebound.WithClock(virtualClock{e}), rebound.WithRandom(jitter)}
	e.clients = make([]rebound.Strategy, c.Clients)
	c.Ratio.Clock = virtualClock{e} // a ratio budget's window moves on virtual time
	for i := range e.clients {
		s, err := strategy(c, p, opts)
		if err != nil {
			return nil, fmt.Errorf("sim: %v: %w", p, err)
		}
		e.clients[i] = s
		if b, ok := s.(interface{ Budget() rebound.Budget }); ok {
			if cb, ok := b.Budget().(rebound.CallBudget); ok {
				if e.calls == nil {
					e.calls = make([]rebound.CallBudget, c.Clients)
				}
				e.calls[i] = cb
			}
		}
	}
	return e, nil
}

// strategy builds one client's strategy for p, with a budget of its own.
func strategy(c Config, p Policy, opts []rebound.Option) (rebound.Strategy, error) {
	rp := rebound.RetryPolicy{MaxAttempts: c.MaxAttempts, Backoff: c.Backoff}
	switch p {
	case NoRetries:
		rp.MaxAttempts = 1
		return rebound.NewRetrier(rp, opts...)
	case Naive, Adaptive, Shed, ShedAdaptive:
		return rebound.NewRetrier(rp, opts...)
	case Throttled:
		t, err := rebound.NewThrottle(c.Throttle)
		if err != nil {
			return nil, err
		}
		return rebound.NewRetrier(rp, append(opts, rebound.WithBudget(t))...)
	case Bucket:
		b, err := rebound.NewTokenBucket(c.Bucket)
		if err != nil {
			return nil, err
		}
		return rebound.NewStandard(append(opts, rebound.WithMaxAttempts(c.MaxAttempts),
			rebound.WithBackoff(c.Backoff), rebound.WithBudget(b))...)
	case Ratio:
		b, err := rebound.NewRatioBudget(c.Ratio)
		if err != nil {
			return nil, err
		}
		return rebound.NewRetrier(rp, append(opts, rebound.WithBudget(b))...)
	case Concurrency:
		b, err := rebound.NewConcurrencyBudget(c.Concurrency)
		if err != nil {
			return nil, err
		}
		return rebound.NewRetrier(rp, append(opts, rebound.WithBudget(b))...)
	}
	return nil, fmt.Errorf("unknown policy %d", int(p))
}

// ctxCheckEvery is how many events pass between looks at the context.
const ctxCheckEvery = 1 << 16

func (e *engine) run(ctx context.Context) (Result, error) {
	for {
		head, queue := e.queue.earliest()
		fromArrivals := e.next < len(e.arr) && (head == nil || e.arr[e.next].at <= head.at)
		if !fromArrivals && head == nil {
			return e.result(), nil
		}
		if e.events >= e.maxEvents {
			return Result{}, ErrTooManyEvents
		}
		if e.events%ctxCheckEvery == 0 && ctx.Err() != nil {
			return Result{}, context.Cause(ctx)
		}
		e.events++
		var err error
		if fromArrivals {
			e.now = e.arr[e.next].at
			err = e.arrive(int32(e.next))
			e.next++
		} else {
			ev := e.queue.pop(queue)
			e.now = ev.at
			if ev.v.kind == sendAttempt {
				e.send(ev.v.req)
			} else {
				err = e.answer(ev.v.req, ev.v.ok, ev.v.pushback)
			}
		}
		if err != nil {
			return Result{}, err
		}
	}
}

func (e *engine) inOutage(t time.Duration) bool {
	return t >= e.c.OutageStart && t < e.outageEnd
}

func (e *engine) schedule(at time.Duration, kind eventKind, ok bool, r int32) {
	e.seq++
	e.queue.push(timed[event]{at: at, seq: e.seq, v: event{kind: kind, ok: ok, req: r}})
}

func (e *engine) arrive(r int32) error {
	e.res.Requests++
	if e.inOutage(e.now) {
		e.res.OutageRequests++
	}
	tok, err := e.clients[e.arr[r].client].AcquireInitialToken(context.Background())
	if err != nil || tok == nil {
		return fmt.Errorf("%w: no initial token: %v", errUnexpected, err)
	}
	if e.calls != nil {
		e.calls[e.arr[r].client].StartCall()
	}
	e.reqs[r].tok = tok
	if d := tok.Delay(); d > 0 {
		e.schedule(e.now+d, sendAttempt, false, r)
		return nil
	}
	e.send(r)
	return nil
}

// send makes an attempt: the server serves it if a worker is free, and
// refuses it otherwise.
func (e *engine) send(r int32) {
	if !e.fleet.allow(e.arr[r].client, epoch.Add(e.now)) {
		// The client's adaptive throttle keeps the attempt home, which
		// ends the request (rebound.ErrRejectedLocally).
		e.res.RejectedLocally++
		e.res.Throttled++
		e.ended(r, true)
		e.reqs[r].tok = nil
		return
	}
	e.res.Attempts++
	if e.now < e.c.Duration {
		e.offered[e.now/e.interval]++
	}
	limit := e.workers
	if e.inOutage(e.now) {
		e.res.OutageAttempts++
		limit = e.degraded
	}
	if e.busy < limit {
		e.busy++
		e.fleet.admitted(epoch.Add(e.now))
		e.schedule(e.now+e.c.Latency, answer, true, r)
		return
	}
	e.seq++
	e.queue.push(timed[event]{at: e.now + refusalDelay, seq: e.seq, v: event{kind: answer, req: r,
		pushback: e.fleet.pushback(e.c, epoch.Add(e.now), limit)}})
}

func (e *engine) answer(r int32, ok bool, pushback time.Duration) error {
	a, req := e.arr[r], &e.reqs[r]
	s := e.clients[a.client]
	e.ended(r, ok)
	if ok {
		e.busy--
		e.fleet.accepted(a.client, epoch.Add(e.now))
		if err := s.RecordSuccess(req.tok); err != nil {
			return fmt.Errorf("%w: %v", errUnexpected, err)
		}
		req.tok = nil
		e.res.Succeeded++
		e.latencies = append(e.latencies, e.now-a.at)
		if e.now < e.c.Duration {
			e.succeededInRun++
			if e.now >= e.outageEnd {
				e.succeededLate++
			}
		}
		return nil
	}
	ctx := context.Background()
	if e.c.Deadline > 0 {
		// Strategies do not keep the context, so one serves every call.
		e.deadline.deadline = epoch.Add(a.at + e.c.Deadline)
		ctx = &e.deadline
	}
	next, err := s.RefreshToken(ctx, req.tok, refusal(pushback))
	req.tok = next
	if err != nil && e.calls != nil {
		e.calls[a.client].EndCall() // the request ends with this failure
	}
	switch {
	case err == nil && next != nil:
		e.schedule(e.now+next.Delay(), sendAttempt, false, r)
	case errors.Is(err, rebound.ErrAttemptsExhausted):
		e.res.Exhausted++
	case errors.Is(err, rebound.ErrThrottled):
		e.res.Throttled++
	case errors.Is(err, rebound.ErrDeadline):
		e.res.PastDeadline++
	case errors.Is(err, rebound.ErrPushback):
		e.res.PushedBack++
	default:
		return fmt.Errorf("%w: %v", errUnexpected, err)
	}
	return nil
}

// ended tells the client's call budget, if any, that request r's attempt
// has ended: a retry (every attempt after the first, which the budget
// admitted) frees its place, and a success, or final, ends the request.
func (e *engine) ended(r int32, final bool) {
	if e.calls == nil {
		return
	}
	cb := e.calls[e.arr[r].client]
	if e.reqs[r].tok.Attempt() > 1 {
		cb.EndRetry()
	}
	if final {
		cb.EndCall()
	}
}

func (e *engine) result() Result {
	r := e.res
	if r.Requests > 0 {
		r.Amplification = float64(r.Attempts) / float64(r.Requests)
		r.SuccessRate = float64(r.Succeeded) / float64(r.Requests)
	}
	if r.OutageRequests > 0 {
		r.OutageAmplification = float64(r.OutageAttempts) / float64(r.OutageRequests)
	}
	r.Goodput = float64(e.succeededInRun) / e.c.Duration.Seconds()
	if late := e.c.Duration - e.outageEnd; late > 0 {
		r.RecoveryGoodput = float64(e.succeededLate) / late.Seconds()
	}
	if n := len(e.latencies); n > 0 {
		slices.Sort(e.latencies)
		r.P50 = e.latencies[(n+1)/2-1]
		r.P99 = e.latencies[(99*n+99)/100-1]
	}
	r.Offered = perInterval(e.c.Duration, e.interval, func(count []int) { copy(count, e.offered) })
	return r
}
