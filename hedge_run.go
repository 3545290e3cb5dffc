package rebound

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/gopanic"
)

// hedge runs op as hedged attempts (see [Hedge]).
//
// Most hedged calls never hedge: the first attempt answers before the
// delay. So the first attempt runs on the caller's goroutine, and the
// machinery that sends hedges and gathers results (a goroutine, a results
// channel, the hedge timer) starts only when the delay fires, or at once
// for a zero delay. Until then the call costs a context for the attempt and
// the call's state: the timer that would start the machinery is stopped
// and kept for the next call (see starter).
func hedge[T any](ctx context.Context, c *Call[T], h *Hedger, op func(ctx context.Context, attempt int) (T, error)) (T, error) {
	var zero T
	if h == nil {
		return zero, errNilHedger
	}
	if op == nil {
		return zero, errNilOp
	}
	cb, _ := h.s.budget.(CallBudget)
	if cb != nil {
		cb.StartCall()
		defer cb.EndCall()
	}
	r := &hedgeRun[T]{parent: ctx, c: *c, h: h, op: op, cb: cb, reason: ErrAttemptsExhausted}
	actx, cancel := context.WithCancel(ctx)
	r.cancels = append(r.cancelBuf[:0], cancel)
	r.first = attemptContext{Context: actx, st: &r.st, n: 1}
	r.sent, r.running = 1, 1
	returned := false
	defer func() {
		if !returned {
			r.unwind()
		}
		r.cancelAll()
	}()
	if h.s.maxAttempts > 1 {
		r.startLater(h.delay())
	}

	v, err := op(&r.first, 1)

	if !r.stopMachine() {
		// The machinery runs the call: hand it this attempt's result and
		// wait for its verdict.
		r.handedFirst = true
		r.resultsChan() <- hedgeResult[T]{n: 1, v: v, err: err}
		r.awaitMachine()
		returned = true
		return r.verdict()
	}
	r.running = 0
	if err == nil {
		returned = true
		recordSuccess(h.s.budget, &token{})
		return v, nil
	}
	// The first attempt failed before any hedge: go on here.
	r.handedFirst = true
	r.resultsChan()
	r.st.listen()
	if !r.handle(hedgeResult[T]{n: 1, v: v, err: err}) {
		r.loop()
	}
	returned = true
	return r.verdict()
}

// verdict returns the call's result, or raises on the caller's goroutine
// the panic of a goroutine of the call (see package gopanic), once every
// attempt has ended.
func (r *hedgeRun[T]) verdict() (T, error) {
	if r.panic != nil {
		r.panic.Raise()
	}
	return r.v, r.err
}

// awaitMachine waits for the machinery's verdict.
func (r *hedgeRun[T]) awaitMachine() {
	<-r.doneChan()
	if r.gone != nil {
		<-r.gone
	}
}

// unwind runs as a panic (or runtime.Goexit) leaves Hedge on the caller's
// goroutine: from attempt 1, from a hook or classifier the caller's
// goroutine ran, or raised again by verdict. No goroutine of the call may
// outlive it: the machinery is told that attempt 1 is over and waited
// for, or, when the caller's goroutine ran the loop, the attempts in
// flight are cancelled and waited for.
func (r *hedgeRun[T]) unwind() {
	switch {
	case !r.handedFirst && !r.stopMachine():
		r.resultsChan() <- hedgeResult[T]{n: 1, panic: errCallerUnwound}
		r.awaitMachine()
	case r.handedFirst && r.res != nil && r.done == nil:
		// The loop ran here; the machinery never started.
		r.drain()
	}
}

// errCallerUnwound is the result of attempt 1 when a panic ends it on the
// caller's goroutine, for the machinery: the caller raises that panic
// itself.
var errCallerUnwound = &gopanic.Panic{Value: "rebound: the caller's goroutine is unwinding"}

// hedgeRun is the state of one [Hedge] call. The caller's goroutine owns it
// until the machinery starts; from then on the machinery's goroutine does,
// and the caller only hands it the first attempt's result.
type hedgeRun[T any] struct {
	st     hedgeState
	parent context.Context
	c      Call[T] // a copy, so that the caller's stays on its stack
	h      *Hedger
	op     func(ctx context.Context, attempt int) (T, error)
	cb     CallBudget
	first  attemptContext // attempt 1's

	cancels   []context.CancelFunc // attempt n's is cancels[n-1]
	cancelBuf [3]context.CancelFunc

	// The lazily started machinery (its start timer is st.start).
	quit  chan struct{} // stops the goroutine that waits on a clock's timer
	gone  chan struct{} // that goroutine has returned
	armed bool          // the machinery may start
	mu    sync.Mutex    // guards res and done
	res   chan hedgeResult[T]
	done  chan struct{} // closed when the machinery has the verdict in v, err

	sent, running int
	timer         Timer
	timerC        <-chan time.Time
	due           time.Time // when timer fires
	stopped       bool      // no further hedges: pushback said stop, the budget refused or the call committed
	classes       *[]classCount
	reason        error
	last          error

	v   T
	err error
	// panic is a panic of a goroutine of the call, for the caller to
	// raise; set before done is closed, or by the caller's own loop.
	panic *gopanic.Panic
	// handedFirst: the caller has handed attempt 1's result over, to the
	// machinery or to its own loop.
	handedFirst bool
}

// startLater starts the machinery after d: at once for d <= 0.
func (r *hedgeRun[T]) startLater(d time.Duration) {
	r.armed = true
	if d <= 0 {
		go r.machine()
		return
	}
	if _, ok := r.h.s.clock.(realClock); ok {
		s := starters.Get().(*starter)
		s.m = r
		s.t.Reset(d)
		r.st.start = s
		return
	}
	// Another clock (a fake one, in tests) has no AfterFunc: a goroutine
	// waits on its timer.
	t := r.h.s.clock.NewTimer(d)
	r.st.start = t
	r.quit, r.gone = make(chan struct{}), make(chan struct{})
	go func(c <-chan time.Time) {
		defer close(r.gone)
		select {
		case <-c:
			r.machine()
		case <-r.quit:
		}
	}(t.C())
}

// stopMachine keeps the machinery from starting, and reports whether it
// did: false when the delay has fired, and the machinery runs the call.
func (r *hedgeRun[T]) stopMachine() bool {
	if !r.armed { // a single attempt: no machinery
		return true
	}
	if !r.st.stopStart() {
		return false
	}
	if r.quit != nil {
		close(r.quit)
		<-r.gone
	}
	return true
}

// A starter starts the machinery of a hedged call when its delay fires:
// one timer of the real clock with the function it runs. A call whose
// first attempt answers in time stops it, and it waits in starters for the
// next call, so that most hedged calls make no timer. One that fired is
// not reused: its machine may still be starting.
type starter struct {
	t *time.Timer
	m interface{ machine() } // the call's hedgeRun, set before t is reset
}

func (s *starter) Stop() bool { return s.t.Stop() }

var starters = sync.Pool{New: func() any {
	s := new(starter)
	s.t = time.AfterFunc(time.Hour, func() { s.m.machine() })
	s.t.Stop()
	return s
}}

// resultsChan returns the channel the attempts send their results on,
// made on first use: by the machinery, or by the caller should the first
// attempt fail before it starts.
func (r *hedgeRun[T]) resultsChan() chan hedgeResult[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.res == nil {
		r.res = make(chan hedgeResult[T], r.h.s.maxAttempts)
	}
	return r.res
}

// doneChan returns the channel the machinery closes once it has the
// verdict, made on first use: by the machinery or by the caller waiting
// for it.
func (r *hedgeRun[T]) doneChan() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		r.done = make(chan struct{})
	}
	return r.done
}

// machine is the hedging machinery, started when the delay first fires:
// it sends the hedge that is due and runs the call to its verdict.
//
// A panic on its goroutine (from a classifier, a budget, a hook, the
// hedging delay or the clock) ends the call: the attempts are cancelled
// and waited for, and the caller raises the panic (see package gopanic).
func (r *hedgeRun[T]) machine() {
	returned := false
	defer func() {
		if p := gopanic.Recovered(recover(), returned); p != nil {
			r.abort(p)
		}
		close(r.doneChan())
	}()
	r.resultsChan()
	if r.st.listen() != 0 {
		// The first attempt's response has started: no hedge follows.
		r.stopped, r.reason = true, ErrCommitted
	} else {
		r.hedge()
	}
	r.loop()
	returned = true
}

// cancelAll cancels every attempt's context.
func (r *hedgeRun[T]) cancelAll() {
	for _, c := range r.cancels {
		c()
	}
}

// ended tells the call budget that hedge n, which Allow paid for, has
// ended.
func (r *hedgeRun[T]) ended(n int) {
	if r.cb != nil && n > 1 {
		r.cb.EndRetry()
	}
}

// launch sends the next attempt on a goroutine of its own. A panic in
// the attempt is its result: handle ends the call with it.
func (r *hedgeRun[T]) launch() {
	if n := r.sent + 1; n > 1 && r.c.OnHedge != nil {
		r.c.OnHedge(n)
	}
	r.sent++
	r.running++
	actx, acancel := context.WithCancel(r.parent)
	r.cancels = append(r.cancels, acancel)
	go func(a *attemptContext) {
		returned := false
		defer func() {
			if p := gopanic.Recovered(recover(), returned); p != nil {
				r.res <- hedgeResult[T]{n: a.n, panic: p}
			}
		}()
		v, err := r.op(a, a.n)
		returned = true
		r.res <- hedgeResult[T]{n: a.n, v: v, err: err}
	}(&attemptContext{Context: actx, st: &r.st, n: r.sent})
}

// finish cancels the attempts still running and waits for them.
func (r *hedgeRun[T]) finish() {
	r.cancelAll()
	for r.running > 0 {
		res := <-r.res
		r.running--
		r.ended(res.n)
	}
}

// abort ends the call with p, a panic on the machinery's goroutine: every
// attempt is cancelled and waited for. What the budget is told meanwhile
// may panic again; p is the one the caller raises.
func (r *hedgeRun[T]) abort(p *gopanic.Panic) {
	r.disarm()
	if r.panic == nil {
		r.panic = p
	}
	r.drain()
}

// drain cancels the attempts in flight and waits for them, telling the
// budget of each; a panic of a hook meanwhile is dropped (the call has
// one to raise, or is unwinding from one).
func (r *hedgeRun[T]) drain() {
	r.cancelAll()
	for r.running > 0 {
		res := <-r.res
		r.running--
		if res.panic != nil && res.panic != errCallerUnwound && r.panic == nil {
			r.panic = res.panic
		}
		gopanic.Run(func() { r.ended(res.n) }, func(*gopanic.Panic) {})
	}
}

func (r *hedgeRun[T]) disarm() {
	if r.timer != nil {
		r.timer.Stop()
		r.timer, r.timerC = nil, nil
	}
}

// hedge sends the next hedge if the budget allows, then schedules the one
// after it; with a zero delay that means sending them all now.
func (r *hedgeRun[T]) hedge() {
	if b := r.h.s.budget; b != nil && !b.Allow(false) {
		r.stopped, r.reason = true, ErrThrottled
		if r.c.OnThrottled != nil {
			r.c.OnThrottled(r.sent + 1)
		}
		return
	}
	r.launch()
	if r.sent < r.h.s.maxAttempts {
		r.arm(r.h.delay())
	}
}

func (r *hedgeRun[T]) arm(d time.Duration) {
	r.disarm()
	if r.stopped || r.sent >= r.h.s.maxAttempts {
		return
	}
	if d <= 0 {
		r.hedge()
		return
	}
	r.due = r.h.s.clock.Now().Add(d)
	r.timer = r.h.s.clock.NewTimer(d)
	r.timerC = r.timer.C()
}

// end records the call's verdict.
func (r *hedgeRun[T]) end(v T, err error) {
	r.disarm()
	r.v, r.err = v, err
}

// gaveUp ends the call with every attempt failed or abandoned.
func (r *hedgeRun[T]) gaveUp(reason error) {
	var zero T
	r.end(zero, r.c.gaveUp(r.last, reason, r.sent))
}

// loop runs the call to its verdict.
func (r *hedgeRun[T]) loop() {
	commitC := (<-chan struct{})(r.st.commitC)
	for {
		if r.running == 0 {
			if r.timerC == nil {
				r.gaveUp(r.reason)
				return
			}
			// Only a pushback-delayed hedge is left; do not wait for it
			// past the deadline.
			if dl, ok := r.parent.Deadline(); ok && !r.due.Before(dl) {
				r.gaveUp(ErrDeadline)
				return
			}
		}
		select {
		case <-r.timerC:
			r.timer, r.timerC = nil, nil
			r.hedge()
		case <-commitC:
			// No hedge follows the committed attempt, and the others
			// are of no use: cancel them now.
			commitC = nil
			r.disarm()
			r.stopped, r.reason = true, ErrCommitted
			w := int(r.st.committed.Load())
			for i, c := range r.cancels {
				if i+1 != w {
					c()
				}
			}
		case <-r.parent.Done():
			r.finish()
			r.gaveUp(context.Cause(r.parent))
			return
		case res := <-r.res:
			r.running--
			r.ended(res.n)
			if r.handle(res) {
				return
			}
		}
	}
}

// handle takes one attempt's result, and reports whether the call is over.
func (r *hedgeRun[T]) handle(res hedgeResult[T]) bool {
	if res.panic != nil {
		// The attempt panicked: the call ends, and the caller raises
		// the panic (unless it is unwinding from one of its own).
		if res.panic != errCallerUnwound {
			r.panic = res.panic
		}
		r.disarm()
		r.drain()
		return true
	}
	if w := int(r.st.committed.Load()); w != 0 && w != res.n {
		return false // cancelled, or about to be: the call is w's
	}
	committed := r.st.committed.Load() != 0
	b := r.h.s.budget
	if res.err == nil {
		// A hedge (attempt 2 on) was paid for by Allow.
		recordSuccess(b, &token{paid: res.n > 1})
		r.finish()
		r.end(res.v, nil)
		return true
	}
	r.last = res.err
	if r.parent.Err() != nil {
		r.finish()
		r.gaveUp(context.Cause(r.parent))
		return true
	}
	if errors.Is(res.err, ErrRejectedLocally) {
		// The adaptive throttle kept this hedge home: send no more, and
		// let those sent finish.
		r.disarm()
		r.stopped, r.reason = true, ErrThrottled
		if r.running == 0 {
			r.gaveUp(r.reason)
			return true
		}
		return false
	}
	info := r.h.s.classify(res.err)
	// A6 counts a non-fatal failure or a pushback "stop" against the
	// throttle, whatever happens to the call next.
	if (info.Safety == SafetyYes || info.ServerStop) && b != nil && !info.Local {
		b.RecordFailure()
	}
	var classDone bool
	r.classes, classDone = classLimited(r.classes, info)
	if info.Safety != SafetyYes {
		// A fatal status cancels everything, pushback or not.
		r.finish()
		reason := ErrNotRetryable
		if info.ServerStop {
			reason = ErrPushback
		}
		r.gaveUp(reason)
		return true
	}
	if info.Committed || committed {
		// This attempt's response had started: it is the answer.
		r.finish()
		r.gaveUp(ErrCommitted)
		return true
	}
	switch {
	case info.ServerStop:
		r.disarm()
		r.stopped, r.reason = true, ErrPushback
	case info.Stop != nil:
		r.disarm()
		r.stopped, r.reason = true, info.Stop
	case classDone:
		r.disarm()
		r.stopped, r.reason = true, ErrAttemptsExhausted
	case info.HasRetryAfter:
		r.arm(info.RetryAfter)
	default:
		// At once, unless the server asked for a pause.
		r.arm(info.MinDelay)
	}
	return false
}

// listen readies commitC for the machinery, and returns the attempt the
// call is committed to so far, 0 for none: a [Commit] before listen sent
// nothing.
func (s *hedgeState) listen() int32 {
	s.mu.Lock()
	if s.commitC == nil {
		s.commitC = make(chan struct{}, 1)
	}
	s.mu.Unlock()
	return s.committed.Load()
}

// stopStart keeps the machinery from starting, and reports whether it
// did: false when there is none to stop (it started at once) or the
// delay has fired.
func (s *hedgeState) stopStart() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.startStopped && s.start != nil && s.start.Stop() {
		s.startStopped = true
	}
	if st, ok := s.start.(*starter); ok && s.startStopped {
		// Stopped before it fired, so it never will: the next call
		// can have it.
		s.start = nil
		st.m = nil
		starters.Put(st)
	}
	return s.startStopped
}
