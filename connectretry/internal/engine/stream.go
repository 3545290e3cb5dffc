package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/gopanic"
	"github.com/rebound-go/rebound/internal/msglog"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/perattempt"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// whyOverflow is why a stream committed when a message would overflow its
// replay buffer.
const whyOverflow = "request outgrew the replay buffer"

// Conn is one attempt's stream, as a front door adapts its major's. The
// engine calls Send and CloseSend from the request side and Receive from
// the response side, each side one call at a time, as connect allows.
type Conn interface {
	Send(msg any) error
	CloseSend() error
	Receive(msg any) error
	// CloseResponse closes the response side, for an application done
	// reading (v1's CloseResponse, v2's Close).
	CloseResponse() error
	// Abort tears the attempt down, both sides, unblocking a Send or
	// Receive in progress: the attempt failed, or lost.
	Abort()
	// Pushback returns the values of the pushback header of the answer,
	// once the response has ended with err.
	Pushback(err error) []string
	// Metadata returns the attempt's response metadata, for the
	// classifier (see [Metadata]).
	Metadata() Metadata
}

// Publisher is a Conn that hands over its answer's header fields, where
// the rate limit reads the quota the server publishes
// (WithRateLimitQuota), once the response has ended with err.
type Publisher interface {
	Published(err error) ratelimit.Fields
}

// HeaderSender is a Conn that can send its request headers before any
// message (v2's SendHeaders).
type HeaderSender interface {
	SendHeaders() error
}

// HeaderWaiter is a Conn that can wait for its response headers (v1's
// ResponseHeader blocks until they arrive, or the response ends). The
// per-attempt timer of such an attempt stops as its headers arrive: a
// stream that has answered is never cut. Other attempts' timers stop at
// their first message, or their end.
type HeaderWaiter interface {
	WaitHeader()
}

// Opener opens the attempts of a streaming call.
type Opener interface {
	// Open opens attempt n (1-based) with ctx, its context, and returns
	// its stream and the address of its server. The first attempt sends
	// the caller's request header as it is; a later one a copy of it
	// with the grpc-previous-rpc-attempts header set to n-1.
	Open(ctx context.Context, n int) (Conn, string, error)
}

// Once is the end of a streaming call that no policy governs, when the
// engine must hear of it: to release the method's timeout, to tell the
// adaptive throttle and rate limit the answer, or to count the call
// against the A6 throttle. A nil *Once hears nothing.
type Once struct {
	i      *Interceptor
	t      *Target
	adm    admission
	ctx    context.Context
	cancel context.CancelFunc // the method timeout's; nil for none
	ended  atomic.Bool
}

// Stream is a streaming call under a retry policy, of any shape. The
// request side (Send, CloseSend) sends each message to the attempt in
// flight and keeps its encoding (package replay), within the buffer
// limits, until the call commits; the response side (Receive) runs the
// retry loop on the first Receive: an attempt that fails before its first
// response message is replaced by a new one, which is sent every kept
// message again, then the application's CloseSend if it has called it.
//
// The call commits to the attempt in flight, and keeps nothing more, once
// its first response message arrives (or the response ends cleanly
// without one), once the application reads its response headers or
// trailers (a front door that offers them calls [Stream.Commit]), or once
// a message cannot be kept: it is not a proto message, or it would take
// the call past its buffer limit or the Interceptor past its total.
type Stream struct {
	i         *Interceptor
	procedure string
	p         Policy
	o         Opener
	ctx       context.Context    // the call's: the caller's, with the method timeout and the span
	cancel    context.CancelFunc // the method timeout's; nil for none
	n         *int
	span      *observe.CallSpan // nil unless the interceptor traces
	t         *Target
	clock     rebound.Clock
	first     attempt // the first attempt's, without an allocation of its own

	// sendMu serializes the request side: the application's Send and
	// CloseSend, and the replays, which the response side makes.
	sendMu   sync.Mutex
	buf      msglog.Buffer
	reserved int  // bytes of the Interceptor's total that buf holds
	closed   bool // the application called CloseSend
	headers  bool // the application called SendHeaders
	// sentLast mirrors closed, for the response side to read without
	// waiting for a Send in progress.
	sentLast atomic.Bool
	// hedged says a hedgingPolicy governs the call (see stream_hedge.go):
	// race is its race, once its request is complete, and flushed says the
	// attempt in flight has been sent the request held so far.
	hedged  bool
	race    *hedgeRace
	flushed atomic.Bool

	// mu guards cur, which the response side replaces and the request
	// side reads, and the phase of the call.
	mu        sync.Mutex
	cur       *attempt
	looping   bool // the retry loop runs
	committed atomic.Bool

	// looped says the first Receive, or CloseResponse, has run: the
	// retry loop ran, or the call committed without it.
	looped atomic.Bool

	// The response side: one goroutine at a time.
	attempts int   // guarded by mu
	last     error // the last failed attempt's error, as the loop judged it
	eof      error // the io.EOF of a stream that committed on its clean end
	err      error // the retry loop's
	tr       observe.Tracker

	// When traced: phase says who ends the spans if the caller's context
	// ends (see abandoned); stopAbandon unregisters abandoned.
	phase       atomic.Int32
	stopAbandon func() bool

	// panicked is the first panic of a callback on a goroutine of the
	// call, for the application's next call on the stream to raise, once
	// (raised); see crashed.
	panicked atomic.Pointer[gopanic.Panic]
	raised   atomic.Bool
}

// attempt is one attempt of a Stream.
type attempt struct {
	n      int
	conn   Conn
	ctx    context.Context
	timer  *perattempt.Timer  // nil without a per-attempt timeout
	cancel context.CancelFunc // ends ctx; nil without a timer
	as     *observe.AttemptSpan
	v      *ratelimit.Verdict
	adm    admission
	told   atomic.Bool // the gates have heard how it ended

	// replaced says the retry loop has given the attempt up: an error of
	// its request side is not the application's, whose messages the next
	// attempt is sent.
	replaced atomic.Bool

	// A hedge's replay (see replayHedge): closed when it is done, with
	// its error.
	replayDone chan struct{}
	replayErr  error
}

// abort ends attempt a: its context first, so that closing its stream
// does not wait for a response that will not come (connect v1's
// CloseResponse waits for it), then its stream, both sides.
func (a *attempt) abort() {
	if a.cancel != nil {
		a.cancel()
	}
	a.conn.Abort()
}

// The phases of a traced stream, for abandoned.
const (
	phaseOpen      = iota // no Receive yet: abandoned ends the spans
	phaseRetrying         // the retry loop runs, and ends them itself
	phaseCommitted        // abandoned ends them
	phaseAbandoned        // abandoned ended them before any Receive
)

// StreamPlan is the policy of a streaming call, from [Interceptor.PlanStream].
type StreamPlan struct {
	p      Policy
	ctx    context.Context
	cancel context.CancelFunc
	n      *int
	retry  bool // a retryPolicy governs the call
	hedge  bool // a hedgingPolicy governs it
}

// PlanStream resolves the policy of a streaming call of procedure made
// with ctx: its method config and the caller's Override. An invalid
// Override fails the call here. Governed says whether a retry or hedging
// policy governs the call: then [Interceptor.OpenStream] opens it; else
// the front door opens the one attempt itself, with [StreamPlan.Context],
// and hands it to [Interceptor.OnceStream].
func (i *Interceptor) PlanStream(ctx context.Context, procedure string) (StreamPlan, error) {
	n := attemptsOut(ctx)
	if n != nil {
		*n = 1
	}
	p, err := i.resolve(ctx, procedure)
	if err != nil {
		return StreamPlan{}, err
	}
	if len(p.clamped) > 0 {
		i.logClamped(ctx, procedure, i.opts.ServerName, p.clamped)
	}
	sp := StreamPlan{p: p, n: n}
	sp.ctx, sp.cancel = withTimeout(ctx, p.mc)
	sp.retry = !i.opts.Disabled && p.mc != nil && p.mc.RetryPolicy != nil
	sp.hedge = !i.opts.Disabled && p.mc != nil && p.mc.HedgingPolicy != nil
	if !sp.retry && !sp.hedge && sp.cancel == nil && i.gated() {
		// A stream the gates keep home is dropped unsent (closing
		// connect's stream would send it): its context must end.
		sp.ctx, sp.cancel = context.WithCancel(sp.ctx)
	}
	return sp, nil
}

// Governed reports whether a retry or hedging policy governs the call.
func (sp *StreamPlan) Governed() bool { return sp.retry || sp.hedge }

// Hedged reports whether a hedgingPolicy governs the call: its attempts
// may be sent at the same time.
func (sp *StreamPlan) Hedged() bool { return sp.hedge }

// Context returns the call's context: the caller's, with the method's
// timeout.
func (sp *StreamPlan) Context() context.Context { return sp.ctx }

// Release releases the method's timeout of a call that ends before its
// stream opens.
func (sp *StreamPlan) Release() {
	if sp.cancel != nil {
		sp.cancel()
	}
}

// OnceStream returns what must hear of the end of a stream that no policy
// governs, whose one attempt, opened with sp.Context(), goes to addr: nil
// when nothing must. The adaptive throttle and rate limit let the attempt
// go out first; their refusal is the error, and the front door then ends
// the stream with it, unsent.
func (i *Interceptor) OnceStream(sp *StreamPlan, addr string) (*Once, error) {
	var t *Target
	if i.gated() || i.countsUnpoliced() {
		t = i.Target(addr)
	}
	var adm admission
	if i.gated() {
		var err error
		if adm, err = i.admit(sp.ctx, t); err != nil {
			sp.Release()
			return nil, err
		}
	}
	if sp.cancel == nil && t == nil {
		return nil, nil
	}
	return &Once{i: i, t: t, adm: adm, ctx: sp.ctx, cancel: sp.cancel}, nil
}

// ReadsQuota is Unary.ReadsQuota, for the stream o follows.
func (o *Once) ReadsQuota() bool { return o != nil && o.i.readsQuota() }

// Published is Unary.Published, for the stream o follows: call it before
// Ended.
func (o *Once) Published(f ratelimit.Fields) {
	if o != nil {
		o.adm.fields = f
	}
}

// Ended tells o that the stream's response ended with err (io.EOF for
// success), its answer carrying the pushback header values pushback. It
// counts once; later calls do nothing.
func (o *Once) Ended(err error, pushback []string) {
	if o == nil || o.t == nil || !o.ended.CompareAndSwap(false, true) {
		return
	}
	o.i.answered(o.ctx, &o.adm, err, pushback)
	failure := err
	if errors.Is(err, io.EOF) {
		failure = nil // the stream ended OK
	}
	o.i.CountUnpoliced(o.t, failure, pushback)
}

// Closed releases the method's timeout once the application has closed
// the stream's response.
func (o *Once) Closed() {
	if o != nil && o.cancel != nil {
		o.cancel()
	}
}

// OpenStream opens a streaming call of procedure under a retry policy, as
// sp says, and its first attempt through o. The error, which ends the
// call, is that of an attempt that could not be opened (v2's transports
// may fail to), or of a strategy that could not be made.
func (i *Interceptor) OpenStream(sp *StreamPlan, procedure string, o Opener) (*Stream, error) {
	s := &Stream{i: i, procedure: procedure, p: sp.p, o: o, ctx: sp.ctx, cancel: sp.cancel, n: sp.n, clock: i.clock(), hedged: sp.hedge}
	if i.tracer != nil {
		// The first attempt opens now: its span must be in its context.
		s.ctx, s.span = i.tracer.StartRPC(s.ctx, procedure, "")
	}
	a := &s.first
	addr, err := s.open(a, 1)
	if err != nil {
		s.span.GaveUp(1, rebound.ErrNotRetryable)
		i.endAttempt(a.as, err, false)
		i.endCall(s.span, err)
		sp.Release()
		return nil, err
	}
	s.t = i.Target(addr)
	s.admit(a)
	s.cur = a
	if s.span != nil {
		// A caller may walk away from the stream, its context ended,
		// without reading it to the end or closing it.
		s.stopAbandon = context.AfterFunc(s.ctx, s.abandonedOff)
	}
	return s, nil
}

// open opens attempt a, number n: its span, its per-attempt timer, and a
// place for the classifier's verdict are in its context. It returns the
// address of its server, or the error of a stream that could not be
// opened.
func (s *Stream) open(a *attempt, n int) (string, error) {
	a.n = n
	ctx := s.ctx
	ctx, a.as = s.span.StartAttempt(ctx, n)
	switch {
	case s.p.timeout > 0:
		// The timer starts as the attempt is handed to connect, after
		// any backoff, and runs until it commits. The call's deadline
		// stays on the wire: a committed stream must never be cut.
		ctx, a.timer, a.cancel = perattempt.Start(ctx, s.p.timeout)
	case s.i.gated(), s.hedged:
		// An attempt the gates keep home is dropped unsent (closing
		// connect's stream would send it), and a hedged stream's request
		// goes out only once complete: its context must end it.
		ctx, a.cancel = context.WithCancel(ctx)
	}
	ctx, a.v = s.i.awaitVerdict(ctx)
	a.ctx = ctx
	conn, addr, err := s.o.Open(ctx, n)
	if err != nil {
		a.conn = failedConn{err}
		if a.cancel != nil {
			a.cancel()
		}
		return "", err
	}
	a.conn = conn
	return addr, nil
}

// admit lets attempt a go out once the adaptive throttle and rate limit
// allow it; an attempt they keep home fails every operation with their
// refusal, sending nothing.
func (s *Stream) admit(a *attempt) {
	if !s.i.gated() {
		return
	}
	adm, err := s.i.admit(a.ctx, s.t)
	if err != nil {
		// Dropped unsent: connect makes the request on the first write
		// or close.
		a.cancel()
		a.conn = failedConn{err}
		a.told.Store(true)
		return
	}
	a.adm = adm
}

// told tells the gates how attempt a ended, once.
func (s *Stream) tell(a *attempt, err error) {
	if a.told.CompareAndSwap(false, true) {
		var pushback []string
		if !errors.Is(err, io.EOF) {
			pushback = a.conn.Pushback(err)
		}
		if p, ok := a.conn.(Publisher); ok && s.i.readsQuota() {
			a.adm.fields = p.Published(err)
		}
		s.i.answered(a.ctx, &a.adm, err, pushback)
	}
}

// current returns the attempt in flight.
func (s *Stream) current() *attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Send keeps msg for replay, if the call has not committed, and sends it
// to the attempt in flight. A message that cannot be kept commits the
// call. It returns nil for a kept message that the attempt in flight
// could no longer take: the next attempt is sent it, and if none follows,
// Receive tells the call's end.
func (s *Stream) Send(msg any) error {
	s.raise()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.hedged {
		return s.sendHedged(msg)
	}
	kept := false
	if !s.committed.Load() {
		kept = s.keep(msg)
	}
	if s.committed.Load() && s.buf.End() > s.buf.Base() {
		s.freeLocked()
	}
	a := s.current()
	err := a.conn.Send(msg)
	if err != nil && kept && s.notTheApplications(a, err) {
		return nil
	}
	return err
}

// keep keeps msg's encoding, or commits the call when it cannot be kept,
// and reports whether it was kept. Called with sendMu held.
func (s *Stream) keep(msg any) bool {
	if _, ok := msg.(proto.Message); !ok {
		s.commit("request message not a proto message", true)
		return false
	}
	e, ok := msglog.Encode(msg, s.i.buffers.PerCall-s.buf.Bytes())
	if ok && s.i.buffers.Reserve(s.buf.Bytes(), e.Cost()) {
		s.buf.Push(e)
		s.reserved += e.Cost()
		return true
	}
	if ok {
		e.Free()
	}
	// A6: the message that would overflow the buffer commits the call
	// and is never kept.
	s.commit(whyOverflow, true)
	return false
}

// freeLocked frees every kept message. Called with sendMu held.
func (s *Stream) freeLocked() {
	s.buf.FreeBefore(s.buf.End())
	s.i.buffers.Release(s.reserved)
	s.reserved = 0
}

// SendHeaders sends the request headers of the attempt in flight now,
// without a message, and those of every attempt that follows as it opens.
// It does nothing for a Conn that is not a [HeaderSender].
func (s *Stream) SendHeaders() error {
	s.raise()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.headers = true
	if s.hedged {
		if !s.committed.Load() {
			return nil // sent with the request once it is complete
		}
		if !s.flushed.Load() {
			s.flushLocked() // the headers with it
			return nil
		}
	}
	a := s.current()
	hs, ok := a.conn.(HeaderSender)
	if !ok {
		return nil
	}
	err := hs.SendHeaders()
	if err != nil && !s.committed.Load() && s.notTheApplications(a, err) {
		return nil
	}
	return err
}

// CloseSend closes the request side of the attempt in flight, and of
// every attempt that follows.
func (s *Stream) CloseSend() error {
	s.raise()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.closed = true
	s.sentLast.Store(true)
	if s.hedged {
		if !s.committed.Load() {
			if s.race == nil {
				s.startRaceLocked()
			}
			return nil
		}
		if !s.flushed.Load() {
			s.flushLocked() // the close with it
			return nil
		}
	}
	a := s.current()
	err := a.conn.CloseSend()
	if err != nil && !s.committed.Load() && s.notTheApplications(a, err) {
		return nil
	}
	return err
}

// notTheApplications reports whether err, an error of the request side of
// attempt a, is one the application's call does not return: a has ended
// (its Receive tells how), its timer cut it, or the retry loop has given
// it up.
func (s *Stream) notTheApplications(a *attempt, err error) bool {
	return errors.Is(err, io.EOF) || s.cut(a) || a.replaced.Load()
}

// cut reports whether attempt a was cut by its per-attempt timer: an
// error of its request side then is its timeout, which Receive reports
// and retries.
func (s *Stream) cut(a *attempt) bool {
	return a.timer != nil && perattempt.TimedOut(s.ctx, a.ctx)
}

// Receive receives the next response message. The first Receive runs the
// retry loop, until a response message arrives or the response ends
// cleanly; later ones read the attempt the call committed to.
func (s *Stream) Receive(msg any) error {
	s.raise()
	err := s.receive(msg)
	s.raise() // a panic on a goroutine of the call that ended the loop
	return err
}

func (s *Stream) receive(msg any) error {
	if s.looped.Load() {
		if s.err != nil {
			return s.err
		}
		return s.ended(s.cur.conn.Receive(msg))
	}
	s.looped.Store(true)
	if s.hedged {
		return s.receiveHedged(msg)
	}
	s.mu.Lock()
	committed := s.committed.Load()
	s.looping = !committed
	s.mu.Unlock()
	if committed {
		// Committed before the loop (see Commit): this attempt is the
		// only one.
		return s.ended(s.cur.conn.Receive(msg))
	}
	if s.span != nil {
		s.phase.CompareAndSwap(phaseOpen, phaseRetrying)
	}
	pe := s.i.policyFor(s.t, s.p)
	if pe.err != nil {
		s.err = s.i.policyError(s.procedure, pe.err)
		s.endLoop()
		s.endSpans(s.err)
		return s.err
	}
	d := s.i.rec.Decisions(s.ctx, s.procedure, s.t.name)
	call := observe.Hooks[struct{}](&d)
	if s.span != nil {
		call = observe.Traced[struct{}](&d, s.span)
	}
	_, err := call.Retry(s.ctx, pe.retry, func(context.Context) (struct{}, error) { return struct{}{}, s.attempt(msg) })
	s.endLoop()
	if s.n != nil {
		*s.n = s.attempts
	}
	if err == nil {
		why := "first response message"
		if s.eof != nil {
			why = "response ended without a message"
		}
		s.i.rec.Log(s.ctx, "rebound: committed", s.procedure, s.t.name, slog.Int("attempt", s.attempts), slog.String("why", why))
		s.span.Committed(s.attempts, why)
	}
	s.i.end(s.ctx, &s.tr, 0, s.procedure, s.t.name, false, err)
	if err != nil {
		var re *rebound.Error
		if errors.As(err, &re) {
			// A call committed while the loop waited to retry ends
			// without the attempt the loop counted.
			re.Attempts = s.attempts
		}
		s.err = s.i.giveUp(s.ctx, err)
		s.endSpans(s.err)
		return s.err
	}
	s.traceCommitted()
	if s.eof != nil {
		return s.ended(s.eof) // the io.EOF of a stream without messages
	}
	return nil
}

// endLoop commits the call once the retry loop has ended.
func (s *Stream) endLoop() {
	s.mu.Lock()
	s.looping = false
	s.committed.Store(true)
	s.mu.Unlock()
}

// Commit commits the call to the attempt in flight, for the reason why:
// the application read its response headers or trailer, or a message
// could not be kept. Before the first Receive it records the call, made
// once; while the retry loop runs, the attempt in flight is the last.
func (s *Stream) Commit(why string) {
	s.raise()
	s.commit(why, false)
	s.raise() // a panic of a hedged stream's race, which commit waited for
}

// commit is Commit; sendLocked says the caller holds sendMu.
func (s *Stream) commit(why string, sendLocked bool) {
	s.mu.Lock()
	if s.committed.Swap(true) {
		s.mu.Unlock()
		return
	}
	looping := s.looping
	s.mu.Unlock()
	if s.hedged {
		s.commitHedged(why, sendLocked)
		return
	}
	if looping {
		// The retry loop does not retry the attempt in flight, and
		// records the call when it ends.
		s.i.rec.Log(s.ctx, "rebound: committed", s.procedure, s.t.name, slog.String("why", why))
		return
	}
	s.commitFirst(why)
}

// commitFirst records the call, committed to its first attempt without
// running the retry loop; why, unless empty, is logged. The caller's own
// choices, such as closing the response unread, are not logged.
func (s *Stream) commitFirst(why string) {
	s.traceCommitted()
	s.first.timer.Stop()
	s.tr.Start(time.Time{})
	if why != "" {
		s.i.rec.Log(s.ctx, "rebound: committed", s.procedure, s.t.name, slog.Int("attempt", 1), slog.String("why", why))
		s.span.Committed(1, why)
	}
	s.i.end(s.ctx, &s.tr, 0, s.procedure, s.t.name, false, nil)
}

// attempt makes one attempt of the retry loop and waits for its first
// message. A stream that ends cleanly without one succeeds too.
func (s *Stream) attempt(msg any) error {
	s.mu.Lock()
	if s.attempts > 0 && s.committed.Load() {
		// The application committed the call to the failed attempt
		// (it read its headers, or sent a message that cannot be kept)
		// while the loop waited to retry it.
		s.mu.Unlock()
		return &a6.Failure{Err: s.last, Info: rebound.RetryInfo{Committed: true}}
	}
	s.attempts++
	n := s.attempts
	prev := s.cur
	s.mu.Unlock()
	a := prev
	var replayed <-chan error // the replay's end, for a retry
	if n > 1 {
		s.tr.Start(s.clock.Now())
		// The failed attempt ends before the new one opens: its
		// context first, when it has one of its own. A Send of the
		// application's may be in progress on it (a bidi stream that
		// sends as it reads), and connect's write side must not be
		// closed during one; its read side may be, which makes the
		// transport drop the stream and so ends the Send. The whole
		// stream is closed once the Send has returned.
		prev.replaced.Store(true)
		if prev.cancel != nil {
			prev.cancel()
		}
		if !s.sendMu.TryLock() {
			_ = prev.conn.CloseResponse()
			s.sendMu.Lock()
		}
		prev.conn.Abort()
		s.sendMu.Unlock()
		a = new(attempt)
		if _, err := s.open(a, n); err != nil {
			// The transport cannot open a stream: another attempt
			// would fail the same way.
			return s.failed(a, &a6.Failure{Err: err})
		}
		s.admit(a)
		replayed = s.replay(a)
	} else {
		s.tr.Start(time.Time{})
	}
	if a.timer != nil {
		if hw, ok := a.conn.(HeaderWaiter); ok {
			// Response headers stop the timer, though the caller asked
			// for a message: a stream that has answered is never cut,
			// however long its first message takes.
			hw.WaitHeader()
			a.timer.Stop()
		}
	}
	err := a.conn.Receive(msg)
	stopped := a.timer.Stop() // stopped as its headers came, if it was
	if stopped {
		switch {
		case err == nil:
			return nil
		case errors.Is(err, io.EOF):
			s.eof = err
			s.tell(a, err)
			return nil
		}
	}
	// The attempt failed, or its timer cut it as it answered: then its
	// message, unseen by the application, is dropped for the retry's.
	if replayed != nil {
		// The replay ends with the attempt; it may have ended it.
		if rerr := <-replayed; rerr != nil {
			ae := &a6.Failure{Err: rerr} // the client's: not retryable
			if s.cut(a) && s.panicked.Load() == nil {
				ae = s.i.timeoutError(s.p.timeout)
				s.tr.TimedOut()
				a.v.Release()
			}
			s.tell(a, rerr)
			return s.failed(a, ae)
		}
	}
	var ae *a6.Failure
	if a.timer != nil && (!stopped || perattempt.TimedOut(s.ctx, a.ctx)) {
		if err == nil {
			err = context.Cause(a.ctx)
		}
		s.tell(a, err)
		ae = s.i.timeoutError(s.p.timeout)
		ae.Info = perattempt.Info(s.committed.Load())
		s.tr.TimedOut()
		a.v.Release()
	} else {
		s.tell(a, err)
		ae = s.i.classify(a.v, err, a.conn.Pushback(err), a.conn.Metadata(), s.p.mc.RetryPolicy.RetryableStatusCodes, s.procedure, s.committed.Load())
	}
	return s.failed(a, ae)
}

// failed records the failure of attempt a, as the loop judges it, and
// returns it.
func (s *Stream) failed(a *attempt, ae *a6.Failure) error {
	s.last = ae.Err
	s.tr.Failed(a.n, ae.Info, s.clock.Now())
	s.i.endAttempt(a.as, ae, false)
	return ae
}

// replay makes a the attempt in flight and sends it every kept message,
// then SendHeaders and CloseSend if the application has called them, on a
// goroutine of its own: the response side meanwhile receives from a, for
// a server that answers each message before it reads the next (an
// in-process one, or any once flow control fills) would otherwise wait on
// the replay as the replay waits on it. The application's own Sends wait
// for the replay, and follow it. The channel returned tells the replay's
// end: nil, or the client's own error (a message that cannot be decoded
// or marshaled), after which a is aborted; a that ended meanwhile is no
// error: its Receive tells its end.
func (s *Stream) replay(a *attempt) <-chan error {
	done := make(chan error, 1)
	s.sendMu.Lock()
	s.mu.Lock()
	s.cur = a
	s.mu.Unlock()
	go func() {
		err := s.crashedError() // unless the replay returns
		defer func() {
			s.sendMu.Unlock()
			if err != nil {
				gopanic.Run(a.abort, s.crashed)
			}
			done <- err
		}()
		gopanic.Run(func() { err = s.replayLocked(a) }, s.crashed)
	}()
	return done
}

// replayLocked sends a what replay says. Called with sendMu held.
func (s *Stream) replayLocked(a *attempt) error {
	if hs, ok := a.conn.(HeaderSender); ok && s.headers {
		if err := hs.SendHeaders(); err != nil {
			return s.sendErr(a, err)
		}
	}
	for j := s.buf.Base(); j < s.buf.End(); j++ {
		m, err := s.buf.At(j).Message()
		if err != nil {
			return err
		}
		if err := a.conn.Send(m); err != nil {
			return s.sendErr(a, err)
		}
	}
	if s.closed {
		if err := a.conn.CloseSend(); err != nil {
			return s.sendErr(a, err)
		}
	}
	return nil
}

// sendErr returns the error of a replay whose send to a failed with err:
// none when a has ended (its Receive tells how), or its timer cut it.
func (s *Stream) sendErr(a *attempt, err error) error {
	if errors.Is(err, io.EOF) || s.cut(a) {
		return nil
	}
	return err
}

// ended ends the call's spans and tells the gates once the committed
// attempt's response has ended with err; it returns err.
func (s *Stream) ended(err error) error {
	a := s.current()
	// The call has committed: no classifier judges the end.
	a.v.Release()
	if err != nil {
		s.tell(a, err)
		s.endSpans(err)
	}
	return err
}

// endSpans ends the spans of the call and its current attempt, when
// traced, with err.
func (s *Stream) endSpans(err error) {
	if s.span == nil {
		return
	}
	s.stopAbandon()
	s.i.endAttempt(s.cur.as, err, false)
	s.i.endCall(s.span, err)
}

// abandonedOff is abandoned on the goroutine of the context's end, where a
// panic of the tracer's would end the process: the application's next
// call on the stream raises it instead. The call's span ends still if
// the attempt's was what panicked.
func (s *Stream) abandonedOff() {
	gopanic.Run(s.abandoned, func(p *gopanic.Panic) {
		s.crashed(p)
		gopanic.Run(func() { s.i.endCall(s.span, s.i.contextError(s.ctx)) }, func(*gopanic.Panic) {})
	})
}

// abandoned ends the spans of a traced call whose context ended, unless
// the retry loop is running (it ends them, with the reason it stopped).
// Ending a span twice does nothing, so it may race with the call's own
// end.
func (s *Stream) abandoned() {
	if s.phase.CompareAndSwap(phaseOpen, phaseAbandoned) || s.phase.Load() == phaseCommitted {
		err := s.i.contextError(s.ctx)
		s.i.endAttempt(s.current().as, err, false)
		s.i.endCall(s.span, err)
	}
}

// traceCommitted moves a traced call past its retry loop, to the phase in
// which abandoned ends its spans, and ends them now if the caller's
// context ended while the loop ran.
func (s *Stream) traceCommitted() {
	if s.span == nil || !s.phase.CompareAndSwap(phaseRetrying, phaseCommitted) && !s.phase.CompareAndSwap(phaseOpen, phaseCommitted) {
		return
	}
	if s.ctx.Err() != nil {
		s.abandoned()
	}
}

// CloseResponse closes the response side of the attempt the call
// committed to, committing it if it has not, and releases the call's
// timers and buffer. A panic on a goroutine of the call not yet raised is
// raised once all that is done.
func (s *Stream) CloseResponse() error {
	defer s.raise()
	if s.hedged {
		s.sendMu.Lock()
		r := s.race
		s.sendMu.Unlock()
		if r != nil {
			// The application is done: so is the race.
			r.cancel()
			<-r.done
		}
		if !s.flushed.Load() {
			// Nothing was sent: end the attempt, which connect would
			// otherwise send to read its response.
			s.current().cancel()
		}
	}
	if !s.looped.Swap(true) {
		s.commit("", false)
	}
	// Closed by the caller: whatever it had read is the call's result.
	s.ended(io.EOF)
	a := s.current()
	err := a.conn.CloseResponse()
	if a.cancel != nil {
		a.cancel()
	}
	if s.cancel != nil {
		s.cancel()
	}
	s.sendMu.Lock()
	s.freeLocked()
	s.sendMu.Unlock()
	return err
}

// crashed keeps p, a panic of a callback of the application's (the
// classifier, a logger, a tracer, the meter, an interceptor after
// rebound's) on a goroutine of the call, where it would end the process:
// the goroutine ends the call's work instead, and the application's next
// call on the stream raises p, as errgroup does (see package gopanic). The
// first panic is the one raised.
func (s *Stream) crashed(p *gopanic.Panic) { s.panicked.CompareAndSwap(nil, p) }

// raise raises, on the application's goroutine, the panic crashed kept,
// once: the calls after it fail with the call's error.
func (s *Stream) raise() {
	if p := s.panicked.Load(); p != nil && s.raised.CompareAndSwap(false, true) {
		p.Raise()
	}
}

// errCrashed is the cause of the error of a call that a panic on one of
// its goroutines ended, for the calls on the stream after the panic.
var errCrashed = errors.New("connectretry: a callback panicked on a goroutine of the call")

// crashedError is the error of an attempt or a call that a panic on a
// goroutine of the call ended.
func (s *Stream) crashedError() error {
	return s.i.major.Error(serviceconfig.Internal, errCrashed)
}

// Attempts returns the number of attempts made so far.
func (s *Stream) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.attempts, 1)
}

// Current returns the stream of the attempt in flight: the one the call
// committed to, once it has.
func (s *Stream) Current() Conn { return s.current().conn }

// failedConn is the stream of an attempt that could not be opened, or
// that the gates kept home: every operation fails with err, and nothing
// is sent.
type failedConn struct{ err error }

func (c failedConn) Send(any) error          { return c.err }
func (c failedConn) CloseSend() error        { return c.err }
func (c failedConn) Receive(any) error       { return c.err }
func (c failedConn) CloseResponse() error    { return nil }
func (c failedConn) Abort()                  {}
func (c failedConn) Pushback(error) []string { return nil }
func (c failedConn) Metadata() Metadata      { return nil }
