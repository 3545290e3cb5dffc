package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/shedrule"
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

// request is the state of the request of the arrival with the same
// index: its retry token, and the server's state of its current attempt.
type request struct {
	tok rebound.Token
	srv attemptState
}

// attemptState is the server's state of an attempt.
type attemptState struct {
	// lim holds the attempt while the shedder has admitted it.
	lim   shedrule.Request
	phase phase
	// watched says an expire event is scheduled for the request: one
	// per request, at its deadline, made when an attempt first waits.
	watched bool
}

// phase is where an attempt is on the server.
type phase uint8

const (
	// idle: not on the server (between attempts, or ended).
	idle phase = iota
	// waiting: queued for a worker, or hanging.
	waiting
	// serving: holding a worker.
	serving
)

type eventKind uint8

const (
	// sendAttempt: a retry's delay has passed; the attempt is sent.
	sendAttempt eventKind = iota
	// answer: a failed attempt's answer reaches its client.
	answer
	// finish: the service of an attempt ends, served whole (ok) or cut
	// short by its request's deadline; a served attempt's answer reaches
	// its client at once.
	finish
	// expire: a request's deadline passes; its attempt ends if it is
	// still waiting for a worker or hanging.
	expire
	// outageOver: the outage of a queueing server ends: the workers it
	// took serve again, and the attempts it held are served.
	outageOver
	// attack: an attacker's call or stream reaches the server.
	attack
	// attackDone: an attacker's call ends, or a slow client's hold.
	attackDone
)

// event is what happens at a virtual time; the engine keeps it as a
// timed[event], whose seq orders the events of one instant by when they
// were made.
type event struct {
	kind eventKind
	ok   bool // for finish: served whole; for attackDone: the call succeeded
	// req is the index in engine.arr and engine.reqs of the request, or,
	// for an attacker's request (attack, attackDone, and a finish or a
	// queue entry of one), -1 - its index in engine.attackers.
	req int32
	// pushback is the shedder's answer to a refused attempt: 0 for none,
	// a delay, or -1 for stop.
	pushback time.Duration
}

// Events hold no pointers, so moving them costs the garbage collector
// nothing. Most fall due a fixed time after they are made: a refusal's
// answer (refusalDelay) and a whole service's end (Latency). Each of
// those kinds keeps its own lane, in the order made, which is the order
// due; the heap holds the rest (retries after their backoff, deadlines,
// services cut by a deadline, the attacker's). The earliest of the lanes'
// heads and the heap's is the next event, as one heap by (at, seq) would
// give it, at a fraction of the cost (BenchmarkFleetRow).
const (
	laneAnswer = iota
	laneFinish
	lanes
)

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
	heap      timedHeap[event]
	lanes     [lanes]fifo[event]
	seq       uint64
	clients   []rebound.Strategy
	calls     []rebound.CallBudget // by client, budgets that count requests; nil unless Ratio or Concurrency
	workers   int                  // serving when healthy
	degraded  int                  // serving during the outage (Refuse, Slow)
	busy      int
	outageEnd time.Duration
	interval  time.Duration
	offered   []int // attempts sent per interval
	events    int
	maxEvents int
	deadline  deadlineCtx
	fleet     fleet

	// The queueing server's attempts waiting for a worker, first come
	// first served, from waiting[head]; and those hanging until the
	// outage ends. Each entry is a request index, or -1 - an attacker's.
	// An entry whose attempt has since ended (its deadline passed) is
	// skipped.
	waiting []int32
	head    int
	hung    []int32
	// draw picks the attempts an outage of Hang or FailFast spares.
	draw *rand.Rand

	// The attacker's requests on the server, reused once ended.
	attackers []attemptState
	free      []int32
	attackSeq int // the attacker's calls or streams sent so far

	res       Result
	latencies []time.Duration
	// succeeded counts the requests that succeeded, by arrival time, in
	// steps of recoveryStep, for Result.Recovery.
	succeeded                     []int32
	succeededInRun, succeededLate int
	limits                        []float64 // the shedder's limit at the end of each interval
}

// Streams of the seeded generator for the server's draws and the
// shedder's, apart from the others.
const streamServer = 5

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
		succeeded: make([]int32, recoverySteps(c)),
		draw:      rand.New(rand.NewPCG(c.Seed, streamServer)),
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
	if c.OutageLength > 0 {
		switch {
		case c.Shape == Slow || c.Shape == Hang:
			e.schedule(e.outageEnd, outageOver, false, 0)
		case c.Shape == SlowClients || c.Shape == FastCalls && e.fleet.lim != nil:
			// Without a shedder, calls that take no worker change
			// nothing: none are sent.
			e.schedule(c.OutageStart, attack, false, 0)
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
		due, lane := e.heap.head(), -1
		for i := range e.lanes {
			if h := e.lanes[i].head(); h != nil && (due == nil || h.before(due)) {
				due, lane = h, i
			}
		}
		fromArrivals := e.next < len(e.arr) && (due == nil || e.arr[e.next].at <= due.at)
		if !fromArrivals && due == nil {
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
			e.advance(e.arr[e.next].at)
			err = e.arrive(int32(e.next))
			e.next++
		} else {
			var t timed[event]
			if lane < 0 {
				t = e.heap.pop()
			} else {
				t = e.lanes[lane].pop()
			}
			ev := t.v
			e.advance(t.at)
			switch ev.kind {
			case sendAttempt:
				e.send(ev.req)
			case answer:
				err = e.answer(ev.req, ev.pushback)
			case finish:
				err = e.finish(ev.req, ev.ok)
			case expire:
				e.expire(ev.req)
			case outageOver:
				e.endOutage()
			case attack:
				e.attack()
			case attackDone:
				e.attackDone(ev.req, ev.ok)
			}
		}
		if err != nil {
			return Result{}, err
		}
	}
}

// advance moves the clock to t, noting the shedder's limit at the end of
// every interval it passes.
func (e *engine) advance(t time.Duration) {
	if lim := e.fleet.lim; lim != nil {
		for len(e.limits) < len(e.offered) && time.Duration(len(e.limits)+1)*e.interval <= t {
			e.limits = append(e.limits, float64(lim.Limit()))
		}
	}
	e.now = t
}

func (e *engine) inOutage(t time.Duration) bool {
	return t >= e.c.OutageStart && t < e.outageEnd
}

// schedule adds an event at at to the heap.
func (e *engine) schedule(at time.Duration, kind eventKind, ok bool, r int32) {
	e.seq++
	e.heap.push(timed[event]{at: at, seq: e.seq, v: event{kind: kind, ok: ok, req: r}})
}

// scheduleIn adds an event that falls due after lane's fixed delay d to
// that lane.
func (e *engine) scheduleIn(lane int, d time.Duration, ev event) {
	e.seq++
	e.lanes[lane].push(timed[event]{at: e.now + d, seq: e.seq, v: ev})
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

// send makes an attempt of request r: the shedder, if any, admits it or
// sheds it, and the server then serves it (see serve).
func (e *engine) send(r int32) {
	client := e.arr[r].client
	if !e.fleet.allow(client, epoch.Add(e.now)) {
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
	if e.inOutage(e.now) {
		e.res.OutageAttempts++
	}
	if pb, ok := e.fleet.admit(epoch.Add(e.now), peerOf(client), &e.reqs[r].srv.lim); !ok {
		e.res.Shed++
		e.refused(r, pb)
		return
	}
	e.serve(r)
}

// serve is what the server does with an attempt of request r it has
// admitted, by the shape of the outage.
func (e *engine) serve(r int32) {
	outage := e.inOutage(e.now)
	switch {
	case e.c.Shape == Refuse:
		limit := e.workers
		if outage {
			limit = e.degraded
		}
		if e.busy < limit {
			e.start(r)
			return
		}
		e.fail(r)
	case outage && e.c.Shape == FailFast && e.hit():
		e.fail(r)
	case outage && e.c.Shape == Hang && e.hit():
		e.reqs[r].srv.phase = waiting
		e.hung = append(e.hung, r)
		e.watch(r)
	default:
		e.enqueue(r)
	}
}

// hit draws whether the outage of Hang or FailFast hits an attempt: it
// spares OutageCapacity of them.
func (e *engine) hit() bool {
	return e.c.OutageCapacity == 0 || e.draw.Float64() >= e.c.OutageCapacity
}

// fail is the handler failing attempt r at once with UNAVAILABLE, with no
// pushback of its own: the shedder, if any, speaks for it.
func (e *engine) fail(r int32) {
	e.res.Refused++
	e.refused(r, e.fleet.refuse(epoch.Add(e.now), &e.reqs[r].srv.lim))
}

// refused sends the answer of a refused attempt to its client.
func (e *engine) refused(r int32, pushback time.Duration) {
	e.scheduleIn(laneAnswer, refusalDelay, event{kind: answer, req: r, pushback: pushback})
}

// capacity is the workers serving now.
func (e *engine) capacity() int {
	if e.c.Shape == Slow && e.inOutage(e.now) {
		return e.degraded
	}
	return e.workers
}

// enqueue starts the service of id (a request, or -1 - an attacker's) if
// a worker is free, and queues it otherwise.
func (e *engine) enqueue(id int32) {
	if e.busy < e.capacity() {
		// Nothing waits: a freed worker takes the queue's first.
		e.start(id)
		return
	}
	e.state(id).phase = waiting
	e.waiting = append(e.waiting, id)
	if id >= 0 {
		e.watch(id)
	}
}

// state returns the server's state of id's attempt.
func (e *engine) state(id int32) *attemptState {
	if id < 0 {
		return &e.attackers[-1-id]
	}
	return &e.reqs[id].srv
}

// watch makes sure the request r's attempt ends at its deadline if it is
// still waiting then.
func (e *engine) watch(r int32) {
	st := &e.reqs[r].srv
	if e.c.Deadline == 0 || st.watched {
		return
	}
	st.watched = true
	e.schedule(e.arr[r].at+e.c.Deadline, expire, false, r)
}

// start gives id's attempt a worker. A queueing server's attempt ends at
// its request's deadline if that comes first: its client has gone.
func (e *engine) start(id int32) {
	e.busy++
	e.state(id).phase = serving
	if id >= 0 && e.c.Deadline > 0 && e.c.Shape.queues() {
		if dl := e.arr[id].at + e.c.Deadline; dl < e.now+e.c.Latency {
			e.schedule(dl, finish, false, id)
			return
		}
	}
	e.scheduleIn(laneFinish, e.c.Latency, event{kind: finish, ok: true, req: id})
}

// pull gives the workers that are free to the attempts waiting, first
// come first served.
func (e *engine) pull() {
	for e.head < len(e.waiting) && e.busy < e.capacity() {
		id := e.waiting[e.head]
		e.head++
		if e.state(id).phase == waiting {
			e.start(id)
		}
	}
	if e.head == len(e.waiting) {
		e.waiting, e.head = e.waiting[:0], 0
	}
}

// finish ends the service of id's attempt: served whole (ok), or cut
// short by its deadline.
func (e *engine) finish(id int32, ok bool) error {
	e.busy--
	st := e.state(id)
	st.phase = idle
	e.fleet.end(epoch.Add(e.now), &st.lim, ok)
	var err error
	switch {
	case id < 0:
		e.free = append(e.free, id)
	case ok:
		err = e.succeed(id)
	default:
		e.expired(id)
	}
	if e.c.Shape.queues() {
		e.pull()
	}
	return err
}

// succeed is request r's success: its attempt's answer reaches its
// client.
func (e *engine) succeed(r int32) error {
	a, req := e.arr[r], &e.reqs[r]
	e.ended(r, true)
	e.fleet.accepted(a.client, epoch.Add(e.now))
	if err := e.clients[a.client].RecordSuccess(req.tok); err != nil {
		return fmt.Errorf("%w: %v", errUnexpected, err)
	}
	req.tok = nil
	e.res.Succeeded++
	e.succeeded[recoveryStepOf(e.c, a.at)]++
	e.latencies = append(e.latencies, e.now-a.at)
	if e.now < e.c.Duration {
		e.succeededInRun++
		if e.now >= e.outageEnd {
			e.succeededLate++
		}
	}
	return nil
}

// expire ends request r's attempt at its deadline if it is still waiting
// for a worker or hanging; its entry in the queue is skipped.
func (e *engine) expire(r int32) {
	st := &e.reqs[r].srv
	if st.phase != waiting {
		return
	}
	st.phase = idle
	e.fleet.end(epoch.Add(e.now), &st.lim, false)
	e.expired(r)
}

// expired ends request r at its deadline: its client gives up.
func (e *engine) expired(r int32) {
	e.ended(r, true)
	e.reqs[r].tok = nil
	e.res.PastDeadline++
}

// endOutage ends the outage of a queueing server: the workers it took
// serve again, and the attempts it held, in the order they came, are
// served or queue.
func (e *engine) endOutage() {
	e.pull()
	hung := e.hung
	e.hung = nil
	for _, r := range hung {
		if e.reqs[r].srv.phase == waiting {
			e.enqueue(r)
		}
	}
}

// attack sends the attacker's next call or stream, and schedules the one
// after while the outage lasts.
func (e *engine) attack() {
	k := e.attackSeq
	e.attackSeq++
	if next := e.c.OutageStart + time.Duration(float64(e.attackSeq)/e.c.AttackRate*float64(time.Second)); next < e.outageEnd {
		e.schedule(next, attack, false, 0)
	}
	var id int32
	if n := len(e.free); n > 0 {
		id, e.free = e.free[n-1], e.free[:n-1]
	} else {
		e.attackers = append(e.attackers, attemptState{})
		id = int32(-len(e.attackers))
	}
	st := e.state(id)
	*st = attemptState{}
	now := epoch.Add(e.now)
	if _, ok := e.fleet.admit(now, peerOf(int32(e.c.Clients)), &st.lim); !ok {
		// Shed: the attacker does not retry.
		e.free = append(e.free, id)
		return
	}
	if e.c.Shape == FastCalls {
		// Every other call fails at once; the others succeed at once.
		e.schedule(e.now+fastCallTime, attackDone, k%2 == 1, id)
		return
	}
	// A slow client: its handler waits on it, holding no worker.
	st.phase = waiting
	e.fleet.wait(now, &st.lim)
	e.schedule(e.now+SlowHold, attackDone, false, id)
}

// attackDone ends an attacker's fast call, or a slow client's hold: its
// request has come, and is served as any other.
func (e *engine) attackDone(id int32, ok bool) {
	st := e.state(id)
	now := epoch.Add(e.now)
	if e.c.Shape == FastCalls {
		e.fleet.end(now, &st.lim, ok)
		e.free = append(e.free, id)
		return
	}
	e.fleet.unwait(now, &st.lim)
	st.phase = idle
	e.enqueue(id)
}

// answer delivers a failed attempt's answer, which carries the shedder's
// pushback if any, to its client, whose strategy decides on a retry.
func (e *engine) answer(r int32, pushback time.Duration) error {
	a, req := e.arr[r], &e.reqs[r]
	s := e.clients[a.client]
	e.ended(r, false)
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
	r.Recovery, r.Recovered = recovery(e.c, e.arr, e.succeeded)
	if e.fleet.lim != nil {
		for len(e.limits) < len(e.offered) {
			e.limits = append(e.limits, float64(e.fleet.lim.Limit()))
		}
		r.Limit = e.limits
	}
	return r
}

// peerOf is the peer a client's requests come from, as the shedder
// hashes it (splitmix64).
func peerOf(client int32) uint64 {
	z := uint64(client) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
