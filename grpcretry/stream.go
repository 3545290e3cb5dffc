package grpcretry

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/distinct"
	"github.com/rebound-go/rebound/internal/gopanic"
	"github.com/rebound-go/rebound/internal/msglog"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/serviceconfig"
)

// StreamClientInterceptor returns the interceptor that retries or hedges
// streaming calls (server, client and bidirectional) per the method's
// policy. It is safe for concurrent use.
//
// A streaming call under a policy keeps every message the application sends,
// and its CloseSend, and sends them again, in order, to each new attempt
// (A6 "Memory Management (Buffering)"). A message is kept as its proto
// encoding and decoded into a new message for each replay, so every
// attempt's server gets exactly the same message. The call commits, that
// is makes no further attempt and keeps nothing more, once
//
//   - an attempt receives response headers or a message (which is also
//     when the application can first read headers); a Trailers-Only
//     response, the usual form of an early error, does not commit;
//   - keeping a message would take the call past the per-call buffer limit
//     or the client past its total limit ([WithBufferLimits]); that
//     message is sent but never kept;
//   - the application sends a message that is not a proto message, or does
//     not encode: it cannot be kept.
//
// Messages still kept when the call commits are freed as the committed
// attempt sends them, so memory stays bounded however long the stream
// runs.
//
// Under a retryPolicy, a failed attempt is retried as a unary call is:
// backoff and pushback wait on the client's clock and never past the
// deadline, and throttling is shared with unary calls. A server-streaming
// call that fails before any response is retried. Under a hedgingPolicy,
// every message goes to every attempt in flight (a hedge that starts later
// is sent the earlier ones first); the first attempt to receive headers or a
// message, or to end OK, wins and the others are cancelled; when the buffer
// overflows, the attempt that has sent the most messages goes on alone.
// Hedged streams use the configured hedgingDelay, not [WithAdaptiveHedging].
//
// A stream that succeeds at once costs little more than grpc-go's: its
// first attempt opens on the caller's goroutine and, as in grpc-go's own
// retries, the application's calls learn of its headers and its end, so
// that no goroutine of the interceptor runs. A failure is therefore
// retried, or hedged at once, when the application next receives, sends or
// asks for headers. A goroutine watches the attempts, and retries or hedges
// without waiting for the application, from the start when attempts have a
// per-attempt timeout, and otherwise once the call keeps a second message,
// an attempt has failed, or the hedging delay has passed. Response headers
// that arrive before the hedging delay stop the hedge even if the
// application has not read them: the stats handler that [Client.DialOptions]
// installs tells of them (with the interceptor alone, a goroutine waits for
// them).
//
// The stream behaves as grpc-go's. SendMsg returns once the attempt in
// flight has taken the message, or, while an attempt catches up or hedges
// race, once the message is kept; it returns io.EOF once the call has
// failed. Header blocks
// until headers commit the call, or the call ends. Context is the context
// of the attempt in flight: the committed attempt's after commit, the
// call's own while hedges race or between attempts; unlike grpc-go's, it
// does not commit the call (A6 says what does). RecvMsg returns io.EOF on
// success and, once retrying stops, an error carrying the last attempt's
// status; so does SendMsg for an error made by the client. [CountAttempts] is
// set when the stream ends.
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return c.stream
}

func (c *Client) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	n, ov, opts := callOptions(opts)
	t, cp, err := c.resolve(ctx, method, cc, ov)
	if err != nil {
		return nil, err
	}
	if c.opts.RateLimit != nil {
		streamer = limitedStreamer(t.limit, streamer, c.opts.RateLimitQuota)
	}
	if c.opts.AdaptiveThrottle != nil {
		streamer = gatedStreamer(t.gate, streamer)
	}
	mc := cp.mc
	callCtx, cancel, opts := callSettings(ctx, mc, opts)
	if c.opts.Disabled || mc == nil || (mc.RetryPolicy == nil && mc.HedgingPolicy == nil) {
		var th *rebound.Throttle
		if t.cfg.RetryThrottling != nil && !c.opts.Disabled {
			th = t.throttle
		}
		return once(callCtx, callCtx != ctx, cancel, th, n, desc, cc, method, streamer, opts)
	}
	p := c.policyFor(t, cp)
	if p.err != nil {
		cancel()
		return nil, status.Error(codes.Internal, "grpcretry: "+method+": "+p.err.Error())
	}
	s := &clientStream{c: c, desc: desc, cc: cc, method: method, target: t.uri, streamer: streamer, out: n, parent: callCtx, cancelCall: cancel,
		dec: c.rec.Decisions(callCtx, method, t.uri)}
	s.cond.L = &s.mu
	s.live, s.opening = s.live1[:0], s.opening1[:0]
	s.opts, s.wb = splitWriteBack(opts)
	// Under rebound_distinct, the call's attempts go to distinct
	// backends, hedges and retries alike.
	s.dctx.Context = callCtx
	s.ctx = &s.dctx
	if p.hedge != nil {
		s.hedging = hedging{maxAttempts: mc.HedgingPolicy.Attempts(c.opts.MaxAttempts), delay: mc.HedgingPolicy.HedgingDelay}
		s.hedging.budget = p.budget // the throttle, and WithBudget's
		s.hedger = &s.hedging
		s.clock, s.codes = c.clock, mc.HedgingPolicy.NonFatalStatusCodes
	} else {
		// The first attempt's token is made at its failure (see
		// clientStream.judge): a call that succeeds at once makes none.
		s.policy, s.clock, s.codes = p.retry, p.retry.Clock(), mc.RetryPolicy.RetryableStatusCodes
		s.timeout = cp.timeout
	}
	s.ctx, s.span = c.startCall(s.ctx, method, t)
	if s.hedger != nil {
		s.hctx = hedgedContext{Context: s.ctx, s: s}
		s.ctx = &s.hctx
	}
	if s.cb, _ = p.budget.(rebound.CallBudget); s.cb != nil {
		s.cb.StartCall() // finish ends it
	}
	return s.start()
}

// once makes a call of a single attempt. timed says ctx carries the
// method's timeout, which then ends with the stream; th, when not nil, is
// the throttle that counts the call when it ends (see a6.CountUnpoliced).
func once(ctx context.Context, timed bool, cancel context.CancelFunc, th *rebound.Throttle, n *int, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	if n != nil {
		*n = 1
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		cancel()
		a6.CountUnpoliced(th, false, nil)
		return cs, err
	}
	if !timed && th == nil {
		cancel()
		return cs, nil
	}
	if !timed {
		cancel = nil
	}
	return &onceStream{ClientStream: cs, serverStreams: desc.ServerStreams, cancel: cancel, throttle: th}, nil
}

// onceStream is a stream made once that must see its end: to release the
// method's timeout, as grpc-go does with its own (the context stays usable
// until then), or to count the call against the throttle.
type onceStream struct {
	grpc.ClientStream
	serverStreams bool
	cancel        context.CancelFunc // nil without a method timeout
	throttle      *rebound.Throttle  // nil when not counted
	counted       bool               // guarded by RecvMsg's one caller at a time
}

func (o *onceStream) SendMsg(m any) error {
	err := o.ClientStream.SendMsg(m)
	if err != nil && err != io.EOF && o.cancel != nil {
		o.cancel()
	}
	return err
}

func (o *onceStream) RecvMsg(m any) error {
	err := o.ClientStream.RecvMsg(m)
	if err == nil && o.serverStreams {
		return nil
	}
	if o.cancel != nil {
		o.cancel()
	}
	if o.throttle != nil && !o.counted {
		o.counted = true
		ok := err == nil || err == io.EOF
		var pushback []string
		if !ok {
			pushback = o.Trailer()[a6.PushbackHeader]
		}
		a6.CountUnpoliced(o.throttle, ok, pushback)
	}
	return err
}

// clientStream is a streaming call under a retry or hedging policy. Its
// attempts are grpc-go streams; the application's messages are kept in buf
// and sent to each attempt by whichever goroutine holds the attempt's
// pumping flag: the application's own in the common case, a goroutine of
// ours while an attempt catches up or under hedging.
//
// The first attempt of a retried call is opened on the caller's goroutine
// and, unless it has a per-attempt timeout, watched by the application's
// own calls, as grpc-go's built-in retries do: RecvMsg, SendMsg or Header
// learns of its headers, a message or its end, and judges that end. A
// stream that commits or succeeds at once thus starts no goroutine. Once
// an attempt fails and is retried, or when a timer must be stopped the
// moment headers arrive, a control goroutine watches each attempt for
// response headers or its end (retryLoop, or hedgeLoop and hedgeAttempt)
// and decides what follows.
type clientStream struct {
	c        *Client
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	target   string // the canonical target, for statistics and logs
	streamer grpc.Streamer
	opts     []grpc.CallOption     // every attempt's: the caller's, less wb's
	wb       writeBack             // filled once, when the call ends
	out      *int                  // the caller's Attempts
	codes    serviceconfig.CodeSet // retryable, or non-fatal under hedging
	policy   *rebound.Retrier      // exactly one of policy and hedger is set
	hedger   *hedging
	dec      observe.Decisions // logs the call's decisions
	span     *observe.CallSpan // nil unless the client traces
	clock    rebound.Clock
	dctx     distinct.Context // the call's context, with the backends its attempts went to
	timeout  time.Duration    // retry: per attempt, until it commits; 0 for none
	timeouts atomic.Int32     // attempts cut by the per-attempt timeout
	events   chan attemptEnd  // hedging: attempts that failed, for hedgeLoop; made with it
	commitCh chan struct{}    // hedging: closed on commit, once hedgeLoop runs

	parent     context.Context    // the caller's, with the method's timeout
	ctx        context.Context    // parent's, with the call's span and distinct-backends record
	cancelCall context.CancelFunc // ends the method's timeout
	stopAbort  func() bool
	cb         rebound.CallBudget // the budget, when it counts calls; nil otherwise

	// rd is the committed attempt once it has delivered a message: later
	// RecvMsg calls go straight to it. Only the receiving goroutine (one
	// at a time, as grpc-go requires) uses it.
	rd *attempt
	// direct is the committed attempt once it has sent every kept
	// message: SendMsg and CloseSend go straight to it.
	direct      atomic.Pointer[attempt]
	isCommitted atomic.Bool // mirrors state.committed, so SendMsg can skip keeping
	throttled   atomic.Bool // hedging: the budget refused a hedge
	// Hedging: callStats has tagged an attempt, and so will tell of
	// response headers (sawHeaders) as they arrive.
	tagged, sawHeaders atomic.Bool
	reported           sync.Once
	// panicked is the panic that ended the call on one of its goroutines,
	// for the application's goroutine to raise (see recovered).
	panicked atomic.Pointer[gopanic.Panic]

	mu   sync.Mutex
	cond sync.Cond // broadcast on every change of the state
	state

	first    attempt     // the first attempt's, without an allocation of its own
	live1    [1]*attempt // live's first backing array
	opening1 [1]*attempt // opening's
}

// state is the part of a clientStream that its mu guards.
type state struct {
	buf       msglog.Buffer
	closed    bool // the application called CloseSend
	sentLast  bool // the application may send no more messages
	committed bool // no further attempts
	winner    *attempt
	live      []*attempt             // attempts open and not judged: one at most without hedging
	opening   []*attempt             // hedging: attempts grpc-go is opening
	last      *attempt               // the attempt whose result the call ended with
	spans     []*observe.AttemptSpan // the attempts' spans, when the call is traced
	attempts  int
	tok       rebound.Token // retry: the token of the attempt in flight or next; nil until the first attempt fails
	opened    bool          // an attempt has been put in flight
	watched   bool          // a control goroutine watches the attempts opened from now on
	ended     chan struct{} // made with the first control goroutine, closed when the call ends
	// Hedging, until hedgeLoop runs: what starts it after the hedging
	// delay, and when the first attempt was opened.
	hedgeTimer *time.Timer
	hedgeQuit  chan struct{} // with a clock other than the real one
	begun      time.Time
	hctx       hedgedContext // hedging: the attempts' context, for callStats
	hedging    hedging       // what hedger points to
	done       bool
	final      error // once done: io.EOF on success, else a *callError

	// retries is how many retries or hedges the budget admitted whose
	// end cb has not been told of (see endRetriesLocked).
	retries int
}

// start runs the call's control goroutine and returns the stream once the
// first attempt is open, or the error if no attempt could be opened.
func (s *clientStream) start() (grpc.ClientStream, error) {
	if s.parent.Done() != nil {
		s.stopAbort = context.AfterFunc(s.parent, s.aborted)
	} else {
		s.stopAbort = never // the caller's context never ends
	}
	if s.hedger != nil {
		s.startHedged()
	} else if n := s.count(); n > 0 {
		// The first attempt opens here, saving the common case a
		// hand-off to a control goroutine. Its timer must stop when
		// headers arrive, whether or not the application is reading:
		// then a control goroutine watches it from the start.
		s.watched = s.timeout > 0
		if a := s.open(n); a != nil && (a.watched || a.cs == nil) {
			s.mu.Lock()
			s.watchedLocked()
			s.mu.Unlock()
			go s.retryLoop(a)
		}
	}
	s.mu.Lock()
	for !s.opened && !s.done {
		s.cond.Wait()
	}
	failed := !s.opened
	s.mu.Unlock()
	if failed {
		return nil, s.terminal()
	}
	return s, nil
}

// never is the stop function of an AfterFunc that was not needed.
func never() bool { return false }

// SendMsg keeps m for later attempts if it can and sends it to the
// attempts in flight; see [Client.StreamClientInterceptor].
func (s *clientStream) SendMsg(m any) error {
	if a := s.direct.Load(); a != nil {
		err := a.cs.SendMsg(m)
		if err != nil && err != io.EOF {
			return s.sendError(a, err)
		}
		return err
	}
	err := s.send(m)
	if err == io.EOF && !s.desc.ClientStreams {
		// As grpc-go: the status comes from RecvMsg.
		return nil
	}
	return err
}

func (s *clientStream) send(m any) error {
	var e msglog.Entry
	keep := false
	if !s.isCommitted.Load() {
		e, keep = msglog.Encode(m, s.c.buffers.PerCall)
	}
	s.mu.Lock()
	if keep && !s.done && !s.sentLast && !s.committed && s.c.buffers.Reserve(s.buf.Bytes(), e.Cost()) {
		if !s.desc.ClientStreams {
			s.sentLast = true
		}
		return s.sendKept(m, e)
	}
	e.Free()
	if s.done {
		s.mu.Unlock()
		return io.EOF
	}
	if s.sentLast {
		var a *attempt
		if len(s.live) == 1 && s.live[0].cancel == nil {
			a = s.live[0]
		}
		s.mu.Unlock()
		err := status.Error(codes.Internal, "SendMsg called after CloseSend")
		if a != nil {
			// a has no context of its own to end; grpc-go ends its
			// stream on the same mistake.
			if e := a.cs.SendMsg(m); e != nil && e != io.EOF {
				err = e
			}
		}
		return s.sendError(a, err)
	}
	if !s.desc.ClientStreams {
		s.sentLast = true
	}
	// A6: the message that would overflow the buffer commits the call and
	// is never kept.
	var ended bool
	s.unlockOnPanic(func() {
		if ended = !s.committed && !s.commitOverflowLocked(); !ended {
			s.span.Committed(s.winner.n, whyOverflow)
		}
	})
	if ended {
		s.mu.Unlock()
		return io.EOF
	}
	return s.sendCommitted(m)
}

// release gives back n bytes of the client's total buffer.
func (s *clientStream) release(n int) { s.c.release(n) }

// sendKept keeps m as e and sends it to the attempts in flight. Called
// with mu held; it unlocks.
func (s *clientStream) sendKept(m any, e msglog.Entry) error {
	at := s.buf.End()
	if at > 0 && !s.watched {
		// The call keeps more than one message: a control goroutine
		// watches for the headers that free them, and retries a failed
		// attempt without waiting for the application to notice.
		s.watchLocked()
	}
	s.buf.Push(e)
	var mine *attempt
	for _, a := range s.live {
		if a.pumping || a.broken {
			continue // the pumping goroutine sends it too
		}
		a.pumping = true
		if s.hedger != nil && s.watched {
			go s.pump(a)
		} else {
			mine = a
		}
	}
	s.mu.Unlock()
	if mine == nil {
		return nil
	}
	err := s.drain(mine, m, at)
	if err != io.EOF {
		return err
	}
	// The attempt's stream is done. If m went out before it ended, m was
	// sent, as grpc-go would say: the call's status comes from RecvMsg.
	// Otherwise, if another attempt follows, it will be sent m with the
	// rest.
	if s.sentOn(mine, at) || s.follow(mine) {
		return nil
	}
	return io.EOF
}

// sentOn reports whether a was sent the kept message at index i.
func (s *clientStream) sentOn(a *attempt, i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return a.next > i
}

// sendCommitted sends m, unkept, to the committed attempt once it has
// been sent every kept message. Called with mu held; it unlocks.
func (s *clientStream) sendCommitted(m any) error {
	w := s.winner
	for w.pumping && !s.done {
		s.cond.Wait()
	}
	if s.done || w.broken {
		s.mu.Unlock()
		return io.EOF
	}
	w.pumping = true
	s.mu.Unlock()
	if err := s.drain(w, nil, -1); err != nil {
		return err
	}
	// After commit only the application sends on w.
	s.direct.Store(w)
	err := w.cs.SendMsg(m)
	if err != nil && err != io.EOF {
		return s.sendError(w, err)
	}
	return err
}

// CloseSend closes the sending side of every attempt in flight, now or
// once each has been sent the kept messages. It always returns nil.
func (s *clientStream) CloseSend() error {
	if a := s.direct.Load(); a != nil {
		return a.cs.CloseSend()
	}
	s.mu.Lock()
	if s.done || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed, s.sentLast = true, true
	var mine *attempt
	for _, a := range s.live {
		if a.pumping || a.broken {
			continue
		}
		a.pumping = true
		if s.hedger != nil && s.watched && !s.committed {
			go s.pump(a)
		} else {
			mine = a
		}
	}
	s.mu.Unlock()
	if mine != nil {
		// mine had every kept message: this sends CloseSend alone.
		_ = s.drain(mine, nil, -1)
	}
	return nil
}

// RecvMsg receives from the attempt in flight (under hedging, from the
// winner, once there is one), and moves on to the next attempt when one
// that had received nothing fails and is retried.
func (s *clientStream) RecvMsg(m any) error {
	if a := s.rd; a != nil {
		err := a.cs.RecvMsg(m)
		if err == nil && s.desc.ServerStreams {
			return nil
		}
		return s.recvEnd(a, err)
	}
	for {
		a := s.reader()
		if a == nil {
			return s.terminal()
		}
		err := a.recv(m)
		if err == nil {
			if !s.received(a) {
				// A hedge that lost while the application read it, or
				// an attempt cut by its timer as it answered.
				continue
			}
			if s.desc.ServerStreams {
				return nil
			}
			return s.recvEnd(a, nil)
		}
		if s.follow(a) {
			continue
		}
		return s.recvEnd(a, err)
	}
}

// reader waits for the attempt to receive from: the winner, or without
// hedging the attempt in flight. It returns nil once the call has ended.
func (s *clientStream) reader() *attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.done {
		if s.winner != nil {
			return s.winner
		}
		if s.single() {
			return s.live[0]
		}
		s.cond.Wait()
	}
	return nil
}

// received commits the call to a, which has delivered a message, and
// reports whether the call is a's.
func (s *clientStream) received(a *attempt) bool {
	// A message commits the attempt: it is never cut after. Unless the
	// call had not committed and a's timer fired first, as its headers or
	// this message came (grpc-go hands over what it had buffered before a
	// cut): a's context is cut, and a is judged timed out and retried,
	// now or once its end has been judged. The message is dropped, unseen,
	// for the retry's, as gotHeaders drops headers that came at that
	// instant.
	inTime := a.timer.Stop()
	var mine bool
	s.locked(func() {
		if !s.done && (s.committed || inTime && !a.broken) {
			if !s.committed {
				// The message came after its headers, which commit the
				// call: whichever of them the call heard of first.
				s.span.Committed(a.n, whyHeaders)
			}
			s.commitLocked(a)
		}
		mine = s.winner == a
	})
	if mine {
		s.rd = a
	}
	return mine
}

// recvEnd ends the call after RecvMsg on a returned err: nil after the
// response of a call that is not server-streaming, io.EOF after any
// successful stream, or a's status.
func (s *clientStream) recvEnd(a *attempt, err error) error {
	if err == nil || err == io.EOF {
		s.succeeded(a)
		s.report()
		if s.rd != a && s.failed() {
			// a's timer fired as its headers came: its message was
			// dropped unseen and a judged timed out, with no attempt to
			// follow. Its stream's own end says nothing of the call's.
			return s.terminal()
		}
		return err
	}
	s.judge(a, err, true)
	return s.terminal()
}

// Header returns the headers of the attempt the call committed to on
// receiving them. It blocks until then, or until the call ends: then, if
// the call ended without headers, it returns nil, nil and RecvMsg tells
// the status.
func (s *clientStream) Header() (metadata.MD, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		var a *attempt
		switch {
		case s.done:
			a = s.last
		case s.winner != nil:
			a = s.winner
		case s.single():
			a = s.live[0]
		}
		if a != nil && a.md != nil {
			return a.md.Copy(), nil
		}
		if s.done {
			s.raise()
			return nil, nil
		}
		if a != nil && !a.watched && !a.judging {
			// No one else waits for a's headers: wait here.
			s.mu.Unlock()
			s.watchHere(a)
			s.mu.Lock()
			continue
		}
		s.cond.Wait()
	}
}

// Trailer returns the trailer of the attempt the call ended with. Like
// grpc-go's, it is only meaningful once RecvMsg has returned an error.
func (s *clientStream) Trailer() metadata.MD {
	s.raise()
	s.mu.Lock()
	a := s.last
	if !s.done {
		a = s.current()
	}
	s.mu.Unlock()
	if a == nil || a.cs == nil {
		return nil
	}
	return a.cs.Trailer()
}

// Context returns the context of the attempt in flight: the committed one
// after commit; before, the one attempt of a retried call, or the call's
// own context while hedges race or between attempts.
func (s *clientStream) Context() context.Context {
	s.mu.Lock()
	a := s.current()
	if a == nil && s.done {
		a = s.last
	}
	s.mu.Unlock()
	if a != nil && a.cs != nil {
		return a.cs.Context()
	}
	return s.ctx
}

// current returns the winner, or without hedging the attempt in flight.
// Called with mu held.
func (s *clientStream) current() *attempt {
	if s.winner != nil {
		return s.winner
	}
	if s.single() {
		return s.live[0]
	}
	return nil
}

// single reports whether the call has one attempt in flight, to read
// from before it commits: always under a retry policy, and under hedging
// until the machinery of hedges starts. Called with mu held.
func (s *clientStream) single() bool {
	return len(s.live) > 0 && (s.policy != nil || !s.watched)
}

// failed reports whether the call has ended, and not in success.
func (s *clientStream) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done && s.final != io.EOF
}

// terminal returns the call's result once it has ended, after the
// caller's call options have been filled in.
func (s *clientStream) terminal() error {
	s.report()
	s.raise()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final
}
