package grpcretry

import (
	"context"
	"io"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/gopanic"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/perattempt"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// attempt is one grpc-go stream of a call.
type attempt struct {
	n      int
	cancel context.CancelFunc // hedging, or with a per-attempt timeout: ends this attempt alone
	timer  *perattempt.Timer  // the per-attempt timeout's, until the attempt commits; nil for none
	actx   context.Context    // the attempt's own context, with a timer
	cs     grpc.ClientStream  // nil when it could not be opened
	err    error              // why it could not be opened
	span   *observe.AttemptSpan
	// verdict holds the attempt's answer to the rate limit for the
	// classifier's verdict; nil without both.
	verdict *ratelimit.Verdict

	// Guarded by the call's mu.
	watched bool        // a control goroutine watches it; otherwise the application's calls do
	next    int         // the next kept message to send on cs
	closed  bool        // CloseSend was sent on cs
	pumping bool        // a goroutine is sending on cs
	broken  bool        // cs is done: a send found it so, or its end was judged
	md      metadata.MD // the response headers, once received
	judging bool        // its end is being judged
	judged  bool        // its end has been judged, or the call ended on it
	lost    bool        // cancelled: the call committed to another attempt

	// recvMu makes one cs.RecvMsg run at a time: the application's, or
	// the control goroutine's when cs ended without headers.
	recvMu sync.Mutex
	end    error // guarded by recvMu: the error RecvMsg returned, once it did
}

// status returns how a's stream ended, once it has ended without response
// headers: io.EOF for OK, else its status error. Without headers there is
// no message that reading the status could take from the application.
func (a *attempt) status() error {
	a.recvMu.Lock()
	defer a.recvMu.Unlock()
	if a.end == nil {
		if err := a.cs.RecvMsg(new(emptypb.Empty)); err != nil {
			a.end = err
		} else {
			a.end = status.Error(codes.Internal, "grpcretry: a message arrived without response headers")
		}
	}
	return a.end
}

// recv receives m on a's stream, unless it has ended, and returns the
// error that ended it. recvMu is released however RecvMsg ends: the
// application's codec or interceptors may panic.
func (a *attempt) recv(m any) error {
	a.recvMu.Lock()
	defer a.recvMu.Unlock()
	if a.end == nil {
		a.end = a.cs.RecvMsg(m)
	}
	return a.end
}

// pushback returns the values of a's pushback trailer; a has ended.
func (a *attempt) pushback() []string {
	return a.trailer()[a6.PushbackHeader]
}

// trailer returns the attempt's trailer, nil when it has no stream.
func (a *attempt) trailer() metadata.MD {
	if a.cs == nil {
		return nil
	}
	return a.cs.Trailer()
}

// count numbers a new attempt, or returns 0 if the call makes no more.
func (s *clientStream) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.committed {
		return 0
	}
	s.attempts++
	return s.attempts
}

// open opens attempt n and puts it in flight, with a goroutine to send it
// the kept messages. It returns an attempt with a nil cs if grpc-go could
// not open it, and nil if the call has ended or committed meanwhile.
func (s *clientStream) open(n int) *attempt {
	a := &s.first
	if n > 1 {
		a = &attempt{}
	}
	a.n = n
	ctx := s.ctx
	if s.hedger != nil {
		// A hedge still being opened when the call commits is cancelled
		// with the others.
		ctx, a.cancel = context.WithCancel(ctx)
		s.mu.Lock()
		s.opening = append(s.opening, a)
		s.mu.Unlock()
	} else if s.timeout > 0 {
		// The timer starts as the attempt is handed to grpc-go, after
		// any backoff, and runs until the attempt commits. The call's
		// deadline stays on the wire: the server must not cut the
		// stream once it has committed.
		ctx, a.timer, a.cancel = perattempt.Start(ctx, s.timeout)
		a.actx = ctx
	} else if n > 1 {
		// A retry can be cancelled when the call ends while it is in
		// flight. The first attempt cannot be, and need not: each way
		// the call can end with it in flight ends its stream too (see
		// finish).
		ctx, a.cancel = context.WithCancel(ctx)
	}
	if n > 1 {
		ctx = withPreviousAttempts(ctx, n-1)
	}
	ctx, a.span = startAttempt(ctx, s.span, n)
	if a.span != nil {
		s.mu.Lock()
		s.spans = append(s.spans, a.span)
		s.mu.Unlock()
	}
	ctx, a.verdict = s.c.opts.awaitVerdict(ctx)
	a.cs, a.err = s.streamer(ctx, s.desc, s.cc, s.method, s.opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opening = slices.DeleteFunc(s.opening, func(o *attempt) bool { return o == a })
	if s.done || s.committed {
		if a.cancel != nil {
			a.cancel()
		}
		a.span.End(lostOutcome, rebound.RetryInfo{}, true)
		return nil
	}
	if a.cs == nil {
		if a.cancel != nil {
			a.cancel()
		}
		return a
	}
	a.watched = s.watched
	s.live = append(s.live, a)
	s.opened = true
	if s.buf.End() > 0 || s.closed {
		a.pumping = true
		go s.pump(a)
	}
	s.cond.Broadcast()
	return a
}

// pump sends a what it lacks, on a goroutine of its own.
func (s *clientStream) pump(a *attempt) {
	returned := false
	defer s.recovered(&returned)
	_ = s.drain(a, nil, -1)
	returned = true
}

// drain sends a the kept messages it has not been sent, then CloseSend if
// the application has closed. own is the application's message number
// ownAt, sent as it is rather than decoded. The caller has set a.pumping;
// drain clears it. It returns nil once a has everything, io.EOF if a's
// stream is done, and the call's error if a message could not be sent.
func (s *clientStream) drain(a *attempt, own any, ownAt int) error {
	var err error
	s.mu.Lock()
	for err == nil {
		if s.done || a.lost || a.broken || a.next < s.buf.Base() {
			// The call or the attempt is over (what an attempt lacks is
			// freed only once another has won).
			err = io.EOF
			break
		}
		if i := a.next; i < s.buf.End() {
			m := own
			if i != ownAt {
				// Under mu: a freed encoding goes back to its pool.
				m, err = s.buf.At(i).Message()
			}
			s.mu.Unlock()
			if err == nil {
				err = a.cs.SendMsg(m)
			}
			s.mu.Lock()
			if err == nil {
				a.next = i + 1
				if s.winner == a {
					// Committed: what a has sent is needed no more.
					s.release(s.buf.FreeBefore(a.next))
				}
			}
			continue
		}
		if s.closed && !a.closed {
			a.closed = true
			s.mu.Unlock()
			_ = a.cs.CloseSend()
			s.mu.Lock()
			continue
		}
		break
	}
	if err == io.EOF {
		a.broken = true
	}
	a.pumping = false
	s.cond.Broadcast()
	s.mu.Unlock()
	if err != nil && err != io.EOF {
		return s.sendError(a, err)
	}
	return err
}

// sendError ends the call after the client failed to send a message on a:
// grpc-go has ended a's stream, and another attempt would fail the same
// way.
func (s *clientStream) sendError(a *attempt, err error) error {
	s.mu.Lock()
	reason := rebound.ErrNotRetryable
	if s.committed {
		reason = rebound.ErrCommitted
	}
	s.mu.Unlock()
	s.finish(a, err, reason)
	return s.terminal()
}

// awaitNext waits until the end of a, whose stream is done, has been
// judged, and reports whether another attempt follows.
func (s *clientStream) awaitNext(a *attempt) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.done && !a.judged && !a.lost && a.md == nil {
		s.cond.Wait()
	}
	return !s.done && (a.judged || a.lost)
}

// commitLocked commits the call to w: no further attempts, the others
// cancelled, and what w has sent freed. Called with mu held.
func (s *clientStream) commitLocked(w *attempt) {
	if s.committed {
		return
	}
	s.committed = true
	s.isCommitted.Store(true)
	s.stopHedgeLocked()
	s.winner = w
	s.release(s.buf.FreeBefore(w.next))
	for _, a := range s.live {
		if a != w {
			a.lost = true
			a.cancel() // only hedged calls have more than one attempt
		}
	}
	for _, a := range s.opening {
		a.cancel()
	}
	s.live = append(s.live[:0], w)
	if s.cb != nil {
		// The hedges that lost end now; the winner, when a hedge, with
		// the call.
		keep := 0
		if w.n > 1 {
			keep = 1
		}
		s.endRetriesLocked(s.retries - keep)
	}
	for _, sp := range s.spans {
		if sp != w.span {
			// The attempts that lost, still open or opening, are cancelled
			// now (those that failed before have ended already).
			sp.End(lostOutcome, rebound.RetryInfo{}, true)
		}
	}
	if s.commitCh != nil {
		close(s.commitCh)
	}
	s.cond.Broadcast()
}

// commitOverflowLocked commits the call because a message cannot be kept:
// to the attempt in flight, under hedging the one that has sent the most
// messages, waiting for one whose stream is not done. It reports false if
// the call ended first. Called with mu held.
func (s *clientStream) commitOverflowLocked() bool {
	for !s.done && !s.committed {
		var w *attempt
		for _, a := range s.live {
			if !a.broken && (w == nil || a.next > w.next) {
				w = a
			}
		}
		if w != nil {
			s.commitLocked(w)
			break
		}
		s.cond.Wait()
	}
	return !s.done
}

// gotHeaders records a's response headers, which commit the call to a
// unless it has committed already, and reports whether they were taken.
// They are not when a's per-attempt timer fired as they came and the call
// had not committed: a's context is cut, the application has seen
// nothing of it, and a is judged as timed out, like an attempt whose
// headers came a moment later.
func (s *clientStream) gotHeaders(a *attempt, md metadata.MD) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Headers commit the attempt: it is never cut after.
	if !a.timer.Stop() && !s.committed {
		return false
	}
	a.md = md
	if !s.done {
		if !s.committed {
			// Told before commitLocked ends the others' spans, so that
			// the call's events read in order.
			s.span.Committed(a.n, whyHeaders)
		}
		s.commitLocked(a)
	}
	s.cond.Broadcast()
	return true
}

// claimLocked makes the caller the one to judge a's end, and reports
// whether it is; otherwise it waits for the verdict. Called with mu held.
func (s *clientStream) claimLocked(a *attempt) bool {
	if !s.done && !a.judging {
		a.judging = true
		return true
	}
	for !s.done && !a.judged {
		s.cond.Wait()
	}
	return false
}

// judge decides what follows the failure of a with err, when a is the
// attempt of a retried call or the committed attempt of a hedged one:
// another attempt (judge returns true) or the end of the call. headers
// says a's response had started.
func (s *clientStream) judge(a *attempt, err error, headers bool) bool {
	s.mu.Lock()
	if !s.claimLocked(a) {
		s.mu.Unlock()
		return false
	}
	s.live = slices.DeleteFunc(s.live, func(o *attempt) bool { return o == a })
	a.broken = true // it has ended: nothing more is sent on it
	s.last = a
	committed := headers || s.committed
	tok := s.tok
	md := a.md // gotHeaders writes it under mu
	s.mu.Unlock()
	a.timer.Stop()

	if s.parent.Err() != nil {
		a.verdict.Release()
		s.finish(a, err, context.Cause(s.parent))
		return false
	}
	var info rebound.RetryInfo
	if a.timer != nil && perattempt.TimedOut(s.ctx, a.actx) {
		// Cut by its timer: retried whatever the codes, and counted.
		err, info = newTimeoutError(s.timeout), perattempt.Info(committed)
		s.timeouts.Add(1)
		a.verdict.Release()
	} else {
		info = s.c.opts.verdict(a.verdict, s.method, a6.Info(s.codes.Has(serviceconfig.Code(status.Code(err))), a.pushback(), committed), err, md, a.trailer())
	}
	if a.cancel != nil {
		a.cancel() // the attempt's own context ends with it
	}
	endAttempt(a.span, err, info, false)
	if s.hedger != nil {
		s.finish(a, err, s.hedgeVerdict(info))
		return false
	}
	if s.cb != nil {
		s.locked(func() { s.endRetriesLocked(s.retries) }) // a was the retry in flight, if any
	}
	if tok == nil {
		// The first attempt failed: its token, which a built-in strategy
		// makes without condition, is made now.
		tok, _ = s.policy.AcquireInitialToken(s.parent)
	}
	next, rerr := s.policy.RefreshToken(s.parent, tok, rebound.Mark(err, info))
	if rerr != nil {
		s.finish(a, err, rerr)
		return false
	}
	s.dec.Retry(a.n, err, next.Delay())
	s.span.Retry(a.n, next.Delay())
	s.mu.Lock()
	defer s.mu.Unlock()
	// The budget paid for the retry unless the failure was Local, as
	// rebound.Retrier pays.
	paid := s.cb != nil && !info.Local
	if s.done {
		if paid {
			s.cb.EndRetry() // it will not be made
		}
		return false
	}
	if paid {
		s.retries++
	}
	s.tok = next
	a.judged = true
	s.cond.Broadcast()
	return true
}

// locked runs f with mu held. mu is released however f ends: a callback
// of the application's that f calls (a span's, the budget's) may panic,
// and the call's goroutines must still get mu to end (see recovered).
func (s *clientStream) locked(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// unlockOnPanic calls f with mu held by the caller, which releases it
// itself should f return; should f panic, it releases mu (see locked). The
// caller must not hold a deferred unlock of mu.
func (s *clientStream) unlockOnPanic(f func()) {
	returned := false
	defer func() {
		if !returned {
			s.mu.Unlock()
		}
	}()
	f()
	returned = true
}

// endRetriesLocked tells the call budget that n of the retries or hedges
// it admitted have ended: a retry when it fails, a hedge when it fails or
// loses, any still in flight when the call ends. Call with mu held.
func (s *clientStream) endRetriesLocked(n int) {
	for ; n > 0 && s.retries > 0; n-- {
		s.retries--
		s.cb.EndRetry()
	}
}

// hedgeVerdict charges a failed hedge to the budget as rebound.Hedge does,
// and returns why a committed hedged call that failed with info ends.
func (s *clientStream) hedgeVerdict(info rebound.RetryInfo) error {
	if b := s.hedger.budget; b != nil && (info.Safety == rebound.SafetyYes || info.ServerStop) && !info.Local {
		b.RecordFailure()
	}
	switch {
	case info.Safety != rebound.SafetyYes && info.ServerStop:
		return rebound.ErrPushback
	case info.Safety != rebound.SafetyYes:
		return rebound.ErrNotRetryable
	}
	return rebound.ErrCommitted
}

// succeeded ends the call after a ended OK.
func (s *clientStream) succeeded(a *attempt) {
	s.mu.Lock()
	if !s.claimLocked(a) {
		s.mu.Unlock()
		return
	}
	tok := s.tok
	s.mu.Unlock()
	switch {
	case s.policy != nil && tok == nil:
		firstSuccess(s.policy)
	case s.policy != nil:
		// The attempt succeeded; a strategy that rejects its own token
		// cannot change that.
		_ = s.policy.RecordSuccess(tok)
	case s.hedger.budget != nil:
		s.hedger.budget.RecordSuccess()
	}
	s.finish(a, io.EOF, nil)
}

// recovered is deferred first thing on every goroutine the call starts,
// with a flag the goroutine sets once its work has returned. A panic
// there, from a callback of the application's (a classifier, a budget, a
// logger, a tracer, a clock, the next interceptor or codec), or its
// runtime.Goexit, would end the process out of the application's reach:
// it ends the call instead, and the application's goroutine raises it
// (see package gopanic, and raise).
func (s *clientStream) recovered(returned *bool) {
	if p := gopanic.Recovered(recover(), *returned); p != nil {
		s.crashed(p)
	}
}

// crashed ends the call after p, a panic on one of its goroutines: the
// attempts are cancelled, and the application's calls raise p. A panic
// again while the call ends is dropped: p is the one raised.
func (s *clientStream) crashed(p *gopanic.Panic) {
	s.panicked.CompareAndSwap(nil, p)
	gopanic.Run(func() { s.finish(nil, errPanicked, errPanicked) }, func(*gopanic.Panic) {})
}

// errPanicked is the status of a call whose goroutine panicked, for the
// caller's call options; the application's goroutine raises the panic.
var errPanicked = status.Error(codes.Internal, "grpcretry: a callback panicked on a goroutine of the call")

// raise raises, on the application's goroutine, the panic of one of the
// call's goroutines, if there was one.
func (s *clientStream) raise() {
	if p := s.panicked.Load(); p != nil {
		p.Raise()
	}
}

// aborted is abort on the goroutine of the caller's context's end.
func (s *clientStream) aborted() {
	returned := false
	defer s.recovered(&returned)
	s.abort()
	returned = true
}

// abort ends the call when the caller's context ends, with the context's
// status, as in grpc-go: also between attempts, when the last attempt's
// status is known but the call would have gone on.
func (s *clientStream) abort() {
	s.finish(nil, status.FromContextError(s.parent.Err()).Err(), context.Cause(s.parent))
}

// finish ends the call with err (io.EOF for success) and the reason
// retrying stopped. a is the attempt err came from, if any. Every attempt
// ends, everything kept is freed, and the caller's call options are filled
// in.
func (s *clientStream) finish(a *attempt, err, reason error) {
	if !s.end(a, err, reason) {
		return
	}
	s.stopAbort()
	s.cancelAttempts()
	s.cancelCall()
	s.report()
	s.record(err, reason)
}

// end marks the call ended, for finish, unless it has ended already, and
// reports whether it did. It holds mu, which a panic of a callback of the
// application's under it (a span's, the budget's) releases.
func (s *clientStream) end(a *attempt, err, reason error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return false
	}
	s.done = true
	s.stopHedgeLocked()
	if s.ended != nil {
		close(s.ended)
	}
	for _, l := range s.live {
		l.timer.Stop()
	}
	if a == nil {
		a = s.current()
	}
	if a == nil && len(s.live) > 0 {
		a = s.live[0]
	}
	if a != nil {
		a.timer.Stop()
		s.last = a
		a.judged = true
		endAttempt(a.span, err, rebound.RetryInfo{}, false)
	}
	for _, sp := range s.spans {
		// Attempts still open when the caller's context ended it.
		endAttempt(sp, err, rebound.RetryInfo{}, false)
	}
	if err == io.EOF {
		s.final = io.EOF
	} else {
		s.final = newCallError(err, s.attempts, reason)
	}
	s.release(s.buf.FreeBefore(s.buf.End()))
	// Woken first: a panic in the budget below must not leave a
	// goroutine waiting.
	s.cond.Broadcast()
	if s.cb != nil {
		s.endRetriesLocked(s.retries)
		s.cb.EndCall()
	}
	return true
}

// record ends the call's statistics and logs why retrying stopped. A
// stream's attempts run one after another (or race, when hedged), and all
// but the one that ended the call failed, so the count of failed later
// attempts follows from the outcome.
func (s *clientStream) record(err, reason error) {
	s.mu.Lock()
	n := s.attempts
	s.mu.Unlock()
	call := observe.Call{Method: s.method, Target: s.target, Attempts: n, Hedged: s.hedger != nil, Throttled: s.throttled.Load(),
		AttemptTimeouts: int(s.timeouts.Load())}
	switch {
	case err == io.EOF:
		call.FailedLater = max(n-2, 0)
	default:
		call.FailedLater = max(n-1, 0)
		call.Reason = reason
		s.dec.GaveUp(n, err, reason)
		s.span.GaveUp(n, reason)
	}
	s.c.rec.End(s.parent, &call)
	endCall(s.span, err)
}

// report fills in the caller's Attempts, Header, Trailer and Peer options
// from the attempt the call ended with, and runs its OnFinish callbacks,
// once the call has ended. It runs once; later calls wait for the first.
func (s *clientStream) report() {
	s.reported.Do(func() {
		s.mu.Lock()
		a, final, n := s.last, s.final, s.attempts
		s.mu.Unlock()
		if s.out != nil {
			*s.out = n
		}
		if a != nil && a.cs != nil {
			if len(s.wb.headers) > 0 {
				md, _ := a.cs.Header()
				for _, p := range s.wb.headers {
					*p = md
				}
			}
			for _, p := range s.wb.trailers {
				*p = a.cs.Trailer()
			}
			if len(s.wb.peers) > 0 {
				if pr, ok := peer.FromContext(a.cs.Context()); ok {
					for _, p := range s.wb.peers {
						*p = *pr
					}
				}
			}
		}
		if final == io.EOF {
			final = nil
		}
		s.wb.finish(final)
	})
}

// retryLoop is the control goroutine of a call under a retryPolicy, from
// attempt a on, or with a nil a from the retry after an attempt that has
// been judged: it waits for each attempt's response headers (which commit
// the call and end the loop) or its end, and retries per the policy.
func (s *clientStream) retryLoop(a *attempt) {
	returned := false
	defer s.recovered(&returned)
	s.retryFrom(a)
	returned = true
}

// retryFrom is the work of retryLoop.
func (s *clientStream) retryFrom(a *attempt) {
	for a == nil || s.watch(a) {
		if !s.backoff() {
			return
		}
		n := s.count()
		if n == 0 {
			return
		}
		if a = s.open(n); a == nil {
			return
		}
	}
}

// retryLater starts the control goroutine for the retry after an attempt
// that the application's calls watched and that has been judged.
func (s *clientStream) retryLater() {
	s.mu.Lock()
	s.watchedLocked()
	s.mu.Unlock()
	go s.retryLoop(nil)
}

// watch waits for the response headers of a, a retried call's attempt, or
// for its end, and reports whether another attempt follows: headers commit
// the call to a, and an end without them is judged.
func (s *clientStream) watch(a *attempt) bool {
	err := a.err
	if a.cs != nil {
		if md, _ := a.cs.Header(); md != nil {
			if s.gotHeaders(a, md) {
				return false
			}
			// Its timer fired as the headers came: a is cut, and judged
			// timed out once its context is done. Nothing is read from
			// its stream (a.status), where the application may be
			// reading the message that came with the headers.
			<-a.actx.Done()
			return s.judge(a, context.Cause(a.actx), false)
		}
		if err = a.status(); err == io.EOF {
			s.succeeded(a)
			return false
		}
	}
	return s.judge(a, err, false)
}

// follow reports whether another attempt follows a, whose stream is done,
// once its end has been judged. When no control goroutine watches a, the
// caller judges it, and starts the retry if there is one.
func (s *clientStream) follow(a *attempt) bool {
	s.mu.Lock()
	watched := a.watched
	s.mu.Unlock()
	if !watched {
		s.watchHere(a)
	}
	return s.awaitNext(a)
}

// watchLocked starts the control goroutine of a call whose attempt in
// flight the application's calls have watched so far: a retried call's
// retryLoop, a hedged call's machinery. Called with mu held.
func (s *clientStream) watchLocked() {
	if s.hedger != nil {
		s.hedgeLaterLocked(hedgeArm)
		return
	}
	s.watchedLocked()
	for _, a := range s.live {
		if !a.watched && !a.judging {
			a.watched = true
			go s.retryLoop(a)
		}
	}
}

// watchedLocked records that control goroutines watch the call's attempts
// from now on, and gives them the channel that tells them when the call
// has ended. Called with mu held.
func (s *clientStream) watchedLocked() {
	s.watched = true
	if s.ended == nil {
		s.ended = make(chan struct{})
		if s.done {
			close(s.ended)
		}
	}
}

// cancelAttempts ends the attempts still in flight once the call has
// ended, so that reading their metadata does not block. An attempt
// without a context of its own (a retried call's first) has ended its
// stream already: the call ended on its status, on a client-side error
// grpc-go ended it with too, or on the caller's context.
func (s *clientStream) cancelAttempts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.live {
		if a.cancel != nil {
			a.cancel()
		}
	}
	for _, a := range s.opening {
		a.cancel()
	}
}

// watchHere waits, on the caller's goroutine, for the headers or the end
// of a, an attempt that no control goroutine watches, and acts on them.
func (s *clientStream) watchHere(a *attempt) {
	if s.hedger != nil {
		s.hedgeWatch(a)
	} else if s.watch(a) {
		s.retryLater()
	}
}

// backoff waits the delay of the next attempt's token on the policy's
// clock. It reports false if the call ended first.
func (s *clientStream) backoff() bool {
	s.mu.Lock()
	d := s.tok.Delay()
	s.mu.Unlock()
	if d <= 0 {
		return true
	}
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	t := s.clock.NewTimer(d)
	select {
	case <-t.C():
		return true
	case <-ended:
		// The call ended: by the caller's context (see abort), or
		// otherwise.
		t.Stop()
		return false
	}
}
