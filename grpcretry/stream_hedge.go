package grpcretry

import (
	"context"
	"io"
	"slices"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/serviceconfig"
)

// hedging is the hedgingPolicy of a streaming call, as the client holds
// it to: A6's maxAttempts (clamped), hedgingDelay, and the throttle of the
// server name (nil without one). Adaptive hedging is for unary calls.
type hedging struct {
	maxAttempts int
	delay       time.Duration
	budget      rebound.Budget
}

// attemptEnd is a hedged attempt that failed before the call committed.
type attemptEnd struct {
	a   *attempt
	err error
}

// hedgedContext is the context of a hedged stream's attempts: the call's,
// and the stream, for callStats to tell it of response headers while no
// goroutine waits for them (see startHedged).
type hedgedContext struct {
	context.Context
	s *clientStream
}

type hedgedStreamKey struct{}

func (c *hedgedContext) Value(key any) any {
	if key == (hedgedStreamKey{}) {
		return c.s
	}
	return c.Context.Value(key)
}

// hedgedStream returns the hedged stream that ctx is an attempt's context
// of, or nil.
func hedgedStream(ctx context.Context) *clientStream {
	s, _ := ctx.Value(hedgedStreamKey{}).(*clientStream)
	return s
}

// hedgeStart says what hedgeLoop does first.
type hedgeStart int

const (
	hedgeNow  hedgeStart = iota // the hedging delay has passed: send the next hedge
	hedgeArm                    // wait for what is left of the hedging delay
	hedgeWait                   // an attempt has failed: its end is in events
)

// startHedged opens the first attempt of a hedged call on the caller's
// goroutine. The machinery of hedges (hedgeLoop, and a goroutine watching
// each attempt) starts only when it is needed: once the hedging delay has
// passed, the first attempt has failed, or the call keeps a second
// message; until then the application's own calls watch the attempt, as
// for a retried call. A call that commits or ends OK first starts none.
func (s *clientStream) startHedged() {
	n := s.count()
	if n == 0 {
		return
	}
	if s.hedger.maxAttempts > 1 && s.hedger.delay > 0 {
		s.begun = s.clock.Now()
	}
	a := s.open(n)
	if a == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tagged.Load() && a.cs != nil && s.hedger.maxAttempts > 1 && s.hedger.delay > 0 && !s.done && !s.committed {
		// Without callStats, nothing tells of the attempt's response
		// headers, which must stop the hedge: a goroutine waits for
		// them.
		a.watched = true
		go s.watchHedge(a)
	}
	switch {
	case s.done || s.committed:
	case a.cs == nil:
		a.judging = true
		s.startHedgingLocked(hedgeWait)
		s.events <- attemptEnd{a, a.err}
	case s.hedger.maxAttempts <= 1:
		// No hedge to send: the attempt is the call's only one, and the
		// machinery starts only if it fails before it commits.
	case s.hedger.delay <= 0:
		s.startHedgingLocked(hedgeNow)
	case s.clock == rebound.RealClock():
		s.hedgeTimer = time.AfterFunc(s.hedger.delay, s.dueHedge)
	default:
		// Another clock (a fake one, in tests) has no AfterFunc: a
		// goroutine waits on its timer.
		t := s.clock.NewTimer(s.hedger.delay)
		quit := make(chan struct{})
		s.hedgeQuit = quit
		go func() {
			returned := false
			defer s.recovered(&returned)
			select {
			case <-t.C():
				s.hedgeDue()
			case <-quit:
				t.Stop()
			}
			returned = true
		}()
	}
}

// dueHedge is hedgeDue on the goroutine of the delay's timer.
func (s *clientStream) dueHedge() {
	returned := false
	defer s.recovered(&returned)
	s.hedgeDue()
	returned = true
}

// hedgeDue starts the machinery of hedges once the hedging delay has
// passed, unless the call has committed or the machinery runs already.
func (s *clientStream) hedgeDue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done && !s.committed && !s.watched {
		s.hedgeLaterLocked(hedgeNow)
	}
}

// hedgeLaterLocked starts the machinery of hedges, beginning with first,
// unless callStats has told of the first attempt's response headers: they
// commit the call to it once read, so a goroutine reads them, and no hedge
// is sent. Called with mu held.
func (s *clientStream) hedgeLaterLocked(first hedgeStart) {
	if !s.sawHeaders.Load() {
		s.startHedgingLocked(first)
		return
	}
	for _, a := range s.live {
		if !a.watched && !a.judging {
			a.watched = true
			go s.watchHedge(a)
		}
	}
}

// stopHedgeLocked keeps the hedging delay's timer from starting the
// machinery. Called with mu held.
func (s *clientStream) stopHedgeLocked() {
	if s.hedgeTimer != nil {
		s.hedgeTimer.Stop()
		s.hedgeTimer = nil
	}
	if s.hedgeQuit != nil {
		close(s.hedgeQuit)
		s.hedgeQuit = nil
	}
}

// startHedgingLocked starts the machinery of hedges: hedgeLoop, which
// begins with first, and a goroutine watching each attempt in flight that
// none watches yet. Called with mu held.
func (s *clientStream) startHedgingLocked(first hedgeStart) {
	s.watchedLocked()
	s.stopHedgeLocked()
	s.events = make(chan attemptEnd, s.hedger.maxAttempts)
	s.commitCh = make(chan struct{})
	for _, a := range s.live {
		if !a.watched && !a.judging {
			a.watched = true
			go s.watchHedge(a)
		}
	}
	go s.hedgeLoop(first, s.events, s.commitCh, s.ended)
}

// hedgeLoop is the control goroutine of a call under a hedgingPolicy. It
// sends the hedges, as rebound.Hedge does for a unary call: the first at
// once, each further one after the hedging delay while attempts remain and
// the budget allows; a non-fatal failure sends the next at once (or after
// its pushback delay; a pushback "stop" sends no more); a fatal failure
// ends the call. The loop ends when the call commits (an attempt's
// headers, message or OK end, or a buffer overflow; see hedgeAttempt) or
// ends. The first attempt is already in flight when it starts; first says
// what it does first.
func (s *clientStream) hedgeLoop(first hedgeStart, events <-chan attemptEnd, commitCh, ended <-chan struct{}) {
	returned := false
	defer s.recovered(&returned)
	s.hedges(first, events, commitCh, ended)
	returned = true
}

// hedges is the work of hedgeLoop.
func (s *clientStream) hedges(first hedgeStart, events <-chan attemptEnd, commitCh, ended <-chan struct{}) {
	h := s.hedger
	maxAttempts, budget := h.maxAttempts, h.budget
	var (
		timer   rebound.Timer
		timerC  <-chan time.Time
		due     time.Time // when timer fires
		sent    = 1       // the first attempt's
		running = 1
		stopped bool  // no further hedges: pushback said stop or the budget refused
		reason  error = rebound.ErrAttemptsExhausted
	)
	disarm := func() {
		if timer != nil {
			timer.Stop()
			timer, timerC = nil, nil
		}
	}
	defer disarm()
	launch := func() bool {
		n := s.count()
		if n == 0 {
			return false
		}
		sent++
		running++
		if n > 1 {
			s.dec.Hedge(n)
			s.span.Hedge(n)
		}
		go s.hedgeAttempt(n)
		return true
	}
	// hedge sends the next hedge if the budget allows, then schedules the
	// one after it; with a zero delay that means sending them all now.
	var arm func(d time.Duration)
	hedge := func() {
		if budget != nil && !budget.Allow(false) {
			stopped, reason = true, rebound.ErrThrottled
			s.throttled.Store(true)
			s.dec.Throttled(sent + 1)
			s.span.Throttled(sent + 1)
			return
		}
		if s.cb != nil {
			s.mu.Lock()
			s.retries++ // ends when the hedge fails or loses, or with the call
			s.mu.Unlock()
		}
		if launch() {
			arm(h.delay)
		} else if s.cb != nil {
			s.locked(func() { s.endRetriesLocked(1) }) // the call ended first: the hedge is not sent
		}
	}
	arm = func(d time.Duration) {
		disarm()
		if stopped || sent >= maxAttempts {
			return
		}
		if d <= 0 {
			hedge()
			return
		}
		due = s.clock.Now().Add(d)
		timer = s.clock.NewTimer(d)
		timerC = timer.C()
	}

	switch first {
	case hedgeNow:
		hedge()
	case hedgeArm:
		arm(h.delay - s.clock.Now().Sub(s.begun))
	}
	var (
		last    *attempt // the attempt that failed last, and how
		lastErr error
	)
	for {
		select {
		case <-timerC:
			timer, timerC = nil, nil
			hedge()
		case <-commitCh:
			return
		case <-ended:
			return
		case e := <-events:
			running--
			a, err := e.a, e.err
			var (
				over bool
				md   metadata.MD
			)
			s.locked(func() {
				if over = s.done || s.committed; over {
					return
				}
				a.judged = true
				s.last = a
				md = a.md // gotHeaders writes it under mu
				s.cond.Broadcast()
				if s.cb != nil && a.n > 1 {
					s.endRetriesLocked(1) // a paid hedge has failed
				}
			})
			if over {
				a.verdict.Release()
				return
			}
			last, lastErr = a, err
			if s.parent.Err() != nil {
				a.verdict.Release()
				s.finish(a, err, context.Cause(s.parent))
				return
			}
			info := s.c.opts.verdict(a.verdict, s.method, a6.Info(s.codes.Has(serviceconfig.Code(status.Code(err))), a.pushback(), false), err, md, a.trailer())
			endAttempt(a.span, err, info, false)
			// A6 counts a non-fatal failure or a pushback "stop" against
			// the throttle, whatever happens to the call next.
			if budget != nil && (info.Safety == rebound.SafetyYes || info.ServerStop) && !info.Local {
				budget.RecordFailure()
			}
			if info.Safety != rebound.SafetyYes {
				// A fatal status cancels everything, pushback or not.
				r := rebound.ErrNotRetryable
				if info.ServerStop {
					r = rebound.ErrPushback
				}
				s.finish(a, err, r)
				return
			}
			switch {
			case info.ServerStop:
				disarm()
				stopped, reason = true, rebound.ErrPushback
			case info.Stop != nil:
				disarm()
				stopped, reason = true, info.Stop
			case info.HasRetryAfter:
				arm(info.RetryAfter)
			default:
				arm(info.MinDelay) // at once, unless the server asked for a pause
			}
		}
		if running > 0 || last == nil {
			continue
		}
		if s.isCommitted.Load() {
			return // an attempt won meanwhile: the call is its
		}
		// Every attempt has failed.
		if timerC == nil {
			s.finish(last, lastErr, reason)
			return
		}
		// Only a pushback-delayed hedge is left; do not wait for it past
		// the deadline.
		if dl, ok := s.parent.Deadline(); ok && !due.Before(dl) {
			s.finish(last, lastErr, rebound.ErrDeadline)
			return
		}
	}
}

// hedgeAttempt opens hedged attempt n and watches it.
func (s *clientStream) hedgeAttempt(n int) {
	returned := false
	defer s.recovered(&returned)
	if a := s.open(n); a != nil && a.cs == nil {
		s.events <- attemptEnd{a, a.err}
	} else if a != nil {
		s.hedgeWatch(a)
	}
	returned = true
}

// watchHedge is hedgeWatch on a goroutine of its own.
func (s *clientStream) watchHedge(a *attempt) {
	returned := false
	defer s.recovered(&returned)
	s.hedgeWatch(a)
	returned = true
}

// hedgeWatch waits for the headers or the end of a hedged attempt:
// response headers commit the call to it, and so does an OK end; a
// failure goes to hedgeLoop, which starts now if it does not run yet,
// unless the call has committed to the attempt already (a buffer overflow
// chose it), in which case the failure ends the call.
func (s *clientStream) hedgeWatch(a *attempt) {
	if md, _ := a.cs.Header(); md != nil && s.gotHeaders(a, md) {
		return
	}
	err := a.status()
	// What a's end means is decided under mu, then acted on without it.
	const (
		lost = iota
		ends
		won
		failed
	)
	var (
		next   int
		events chan attemptEnd
	)
	s.locked(func() {
		switch {
		case s.done || s.committed && s.winner != a:
			// Lost: cancelled, or ended after another attempt won.
			next = lost
		case s.committed:
			// A buffer overflow chose a: its end is the call's.
			next = ends
		case err == io.EOF:
			s.span.Committed(a.n, whyOK)
			s.commitLocked(a)
			next = won
		case a.judging:
			// Its end has been told already: the application's calls
			// and a goroutine of the machinery both watched it.
			next = lost
		default:
			// Out of the running before hedgeLoop hears of it, so that
			// an overflow cannot commit the call to it meanwhile.
			s.live = slices.DeleteFunc(s.live, func(o *attempt) bool { return o == a })
			a.judging, a.broken = true, true
			if !s.watched {
				s.startHedgingLocked(hedgeWait)
			}
			events, next = s.events, failed
		}
	})
	switch {
	case next == won || next == ends && err == io.EOF:
		s.succeeded(a)
	case next == ends:
		s.judge(a, err, false)
	case next == failed:
		a.cancel() // its stream has ended: its context too
		events <- attemptEnd{a, err}
	}
}
