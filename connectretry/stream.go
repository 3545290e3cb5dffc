package connectretry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/gopanic"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/perattempt"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Request headers that connect computes for each attempt from its context's
// deadline; a replay keeps its own rather than the first attempt's.
var timeoutKeys = []string{"Grpc-Timeout", "Connect-Timeout-Ms"}

// WrapStreamingClient returns the function that opens client streams.
// Server-streaming calls under a retry policy are retried until the first
// response message arrives; other streams are made once. See the package
// documentation.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		if i.err != nil {
			return newErrConn(spec, connect.NewError(connect.CodeInternal, i.err))
		}
		n := attemptsOut(ctx)
		if n != nil {
			*n = 1
		}
		if i.opts.RateLimit != nil {
			next = i.limitedStreaming(next)
		}
		if i.opts.AdaptiveThrottle != nil {
			next = i.gatedStreaming(next)
		}
		cp, err := i.resolve(ctx, spec.Procedure)
		if err != nil {
			return newErrConn(spec, err)
		}
		if len(cp.clamped) > 0 {
			i.logClamped(ctx, spec.Procedure, i.opts.ServerName, cp.clamped)
		}
		mc := cp.mc
		ctx, cancel := withTimeout(ctx, mc)
		once := i.opts.Disabled || mc == nil || mc.RetryPolicy == nil || spec.StreamType != connect.StreamTypeServer
		var (
			span *observe.CallSpan
			as   *observe.AttemptSpan
			actx = ctx
		)
		if !once && i.tracer != nil {
			// The first attempt opens now: its span must be in its context.
			ctx, span = i.tracer.StartRPC(ctx, spec.Procedure, "")
			actx, as = span.StartAttempt(ctx, 1)
		}
		var (
			timer   *perattempt.Timer
			tcancel context.CancelFunc
		)
		if !once && cp.timeout > 0 {
			// The first attempt's timer starts as it opens.
			actx, timer, tcancel = perattempt.Start(actx, cp.timeout)
		}
		var v *ratelimit.Verdict
		if !once {
			actx, v = i.opts.awaitVerdict(actx)
		}
		conn := next(actx, spec)
		if once {
			var th *rebound.Throttle
			if i.countsUnpoliced() {
				th = i.target(conn.Peer().Addr).throttle
			}
			if cancel != nil || th != nil {
				return &onceConn{StreamingClientConn: conn, cancel: cancel, throttle: th}
			}
			return conn
		}
		s := &serverStream{
			i: i, ctx: ctx, cancel: cancel, next: next, spec: spec, mc: mc, n: n,
			first: conn, conn: conn, clock: i.clock(), span: span, as: as,
			fresh: cp.fresh, timeout: cp.timeout, timer: timer, tctx: actx, tcancel: tcancel, verdict: v,
		}
		if span != nil {
			// A caller may walk away from the stream, its context ended,
			// without reading it to the end or closing it.
			s.stopAbandon = context.AfterFunc(ctx, s.abandoned)
		}
		return s
	}
}

// serverStream is a server-streaming call under a retry policy. The
// request side (Send, CloseRequest, RequestHeader) goes to the first
// attempt; the first Receive runs the retry loop, replaying the request
// message on new attempts, until a response message arrives.
type serverStream struct {
	i      *Interceptor
	ctx    context.Context
	cancel context.CancelFunc // nil without a method timeout
	next   connect.StreamingClientFunc
	spec   connect.Spec
	mc     *serviceconfig.MethodConfig
	n      *int
	first  connect.StreamingClientConn

	mu     sync.Mutex // guards the request side's record below
	msg    any        // the request message, replayed on each attempt
	sends  int
	closed bool

	// The response side is used by one goroutine at a time (connect's
	// contract for StreamingClientConn), so these need no lock.
	conn      connect.StreamingClientConn // the current attempt
	committed bool                        // the retry loop ran, or the caller read the response
	attempts  int
	eof       error // the first attempt's io.EOF, when the stream had no message
	err       error // the retry loop's error
	clock     rebound.Clock
	tr        observe.Tracker
	span      *observe.CallSpan    // nil unless the interceptor traces
	as        *observe.AttemptSpan // the current attempt's span
	fresh     bool                 // mc is this call's own, made by its Override
	timeout   time.Duration        // per attempt, until it commits; 0 for none
	timer     *perattempt.Timer    // the current attempt's, with a timeout
	tctx      context.Context      // the current attempt's context, with a timeout
	tcancel   context.CancelFunc   // ends tctx; nil without a timeout
	verdict   *ratelimit.Verdict   // the current attempt's answer to the rate limit, for the classifier's verdict

	// When traced: phase says who ends the spans if the caller's context
	// ends (see abandoned); stopAbandon unregisters abandoned; panicked is
	// a panic of the tracer's there, for the caller's next call to raise.
	phase       atomic.Int32
	stopAbandon func() bool
	panicked    atomic.Pointer[gopanic.Panic]
}

// The phases of a traced stream, for abandoned.
const (
	phaseOpen      = iota // no Receive yet: abandoned ends the spans
	phaseRetrying         // the retry loop runs, and ends them itself
	phaseCommitted        // abandoned ends them
	phaseAbandoned        // abandoned ended them before any Receive
)

// abandoned ends the spans of a traced call whose context ended, unless
// the retry loop is running (it ends them, with the reason it stopped).
// Ending a span twice does nothing, so it may race with the call's own
// end.
//
// It runs on a goroutine of its own (context.AfterFunc), where a panic of
// the tracer's would end the process: the caller's next call on the
// stream raises it instead (see package gopanic).
func (s *serverStream) abandoned() {
	returned := false
	defer func() {
		if p := gopanic.Recovered(recover(), returned); p != nil {
			s.panicked.CompareAndSwap(nil, p)
		}
	}()
	if s.phase.CompareAndSwap(phaseOpen, phaseAbandoned) || s.phase.Load() == phaseCommitted {
		// s.as is written only in phaseRetrying, which happened before.
		err := contextError(s.ctx)
		endAttempt(s.as, err, false)
		endCall(s.span, err)
	}
	returned = true
}

// raise raises, on the caller's goroutine, a panic of abandoned, if there
// was one, once: the calls after it go on as usual.
func (s *serverStream) raise() {
	if s.span != nil {
		if p := s.panicked.Swap(nil); p != nil {
			p.Raise()
		}
	}
}

// traceCommitted moves a traced call past its retry loop, to the phase in
// which abandoned ends its spans, and ends them now if the caller's
// context ended while the loop ran.
func (s *serverStream) traceCommitted() {
	if s.span == nil || !s.phase.CompareAndSwap(phaseRetrying, phaseCommitted) && !s.phase.CompareAndSwap(phaseOpen, phaseCommitted) {
		return
	}
	if s.ctx.Err() != nil {
		s.abandoned()
	}
}

func (s *serverStream) Spec() connect.Spec         { return s.first.Spec() }
func (s *serverStream) Peer() connect.Peer         { return s.first.Peer() }
func (s *serverStream) RequestHeader() http.Header { return s.first.RequestHeader() }

func (s *serverStream) Send(msg any) error {
	s.mu.Lock()
	s.sends++
	if s.sends == 1 {
		s.msg = msg
	}
	s.mu.Unlock()
	return s.cut(s.first.Send(msg))
}

func (s *serverStream) CloseRequest() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return s.cut(s.first.CloseRequest())
}

func (s *serverStream) Receive(msg any) error {
	s.raise()
	if s.committed {
		if s.err != nil {
			return s.err
		}
		return s.ended(s.conn.Receive(msg))
	}
	s.mu.Lock()
	replayable := s.sends == 1 && s.closed
	s.mu.Unlock()
	if !replayable {
		// The request is not complete, or not one message: it cannot be
		// replayed, so this attempt is the only one.
		s.commitFirst("request not replayable")
		return s.ended(s.conn.Receive(msg))
	}
	s.committed = true
	if s.span != nil {
		s.phase.CompareAndSwap(phaseOpen, phaseRetrying)
	}
	t := s.i.target(s.first.Peer().Addr)
	p := s.i.policyFor(t, callPolicy{mc: s.mc, fresh: s.fresh})
	if p.err != nil {
		s.err = policyError(s.spec.Procedure, p.err)
		s.endSpans(s.err)
		return s.err
	}
	d := s.i.rec.Decisions(s.ctx, s.spec.Procedure, t.name)
	call := observe.Hooks[struct{}](&d)
	if s.span != nil {
		call = observe.Traced[struct{}](&d, s.span)
	}
	_, err := call.Retry(s.ctx, p.retry, func(context.Context) (struct{}, error) { return struct{}{}, s.attempt(msg) })
	if s.n != nil {
		*s.n = s.attempts
	}
	if err == nil {
		why := "first response message"
		if s.eof != nil {
			why = "response ended without a message"
		}
		s.i.rec.Log(s.ctx, "rebound: committed", s.spec.Procedure, t.name, slog.Int("attempt", s.attempts), slog.String("why", why))
		s.span.Committed(s.attempts, why)
	}
	s.i.end(s.ctx, &s.tr, 0, s.spec.Procedure, t.name, false, err)
	if err != nil {
		s.err = giveUp(s.ctx, err)
		s.endSpans(s.err)
		return s.err
	}
	s.traceCommitted()
	if s.eof != nil {
		return s.ended(s.eof) // the io.EOF of a stream without messages
	}
	return nil
}

// ended ends the spans of the call and its committed attempt once the
// response has ended with err; it returns err.
func (s *serverStream) ended(err error) error {
	// The call has committed: no classifier judges the end.
	s.verdict.Release()
	if err != nil {
		s.endSpans(err)
	}
	return err
}

// endSpans ends the spans of the call and its current attempt, when
// traced, with err.
func (s *serverStream) endSpans(err error) {
	if s.span == nil {
		return
	}
	s.stopAbandon()
	endAttempt(s.as, err, false)
	endCall(s.span, err)
}

// commitFirst commits the call to its first attempt without running the
// retry loop, and records it; why, unless empty, is logged. The caller's
// own choices, such as closing the response unread, are not logged.
func (s *serverStream) commitFirst(why string) {
	if s.committed {
		return
	}
	s.committed = true
	s.traceCommitted()
	s.timer.Stop()
	s.tr.Start(time.Time{})
	target := s.i.target(s.first.Peer().Addr).name
	if why != "" {
		s.i.rec.Log(s.ctx, "rebound: committed", s.spec.Procedure, target, slog.Int("attempt", 1), slog.String("why", why))
		s.span.Committed(1, why)
	}
	s.i.end(s.ctx, &s.tr, 0, s.spec.Procedure, target, false, nil)
}

// attempt makes one attempt and waits for its first message. A stream that
// ends cleanly without one succeeds too.
func (s *serverStream) attempt(msg any) error {
	s.attempts++
	if s.attempts > 1 {
		s.tr.Start(s.clock.Now())
		ctx := s.ctx
		ctx, s.as = s.span.StartAttempt(ctx, s.attempts)
		if s.timeout > 0 {
			// The failed attempt's context ends; the new one's timer
			// starts as it is handed to connect.
			s.tcancel()
			ctx, s.timer, s.tcancel = perattempt.Start(ctx, s.timeout)
			s.tctx = ctx
		}
		ctx, s.verdict = s.i.opts.awaitVerdict(ctx)
		if err := s.replay(ctx); err != nil {
			s.tr.Failed(s.attempts, rebound.RetryInfo{}, s.clock.Now())
			endAttempt(s.as, err, false)
			return &a6.Failure{Err: err} // not retryable
		}
	} else {
		s.tr.Start(time.Time{})
	}
	if s.timer != nil {
		// Response headers stop the timer, though the caller asked for
		// a message: a stream that has answered is never cut, however
		// long its first message takes. ResponseHeader waits for them,
		// or for the attempt's end.
		_ = s.conn.ResponseHeader()
		s.timer.Stop()
	}
	err := s.conn.Receive(msg)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		s.eof = err
		return nil
	}
	var ae *a6.Failure
	if s.timer != nil && perattempt.TimedOut(s.ctx, s.tctx) {
		ae = timeoutError(s.timeout)
		s.tr.TimedOut()
		s.verdict.Release()
	} else {
		ae = classify(s.verdict, err, s.mc.RetryPolicy.RetryableStatusCodes, &s.i.opts, s.spec.Procedure)
	}
	s.tr.Failed(s.attempts, ae.Info, s.clock.Now())
	endAttempt(s.as, ae, false)
	return ae
}

// replay closes the failed attempt and sends the request again on a new
// one, with the first attempt's request header and the attempts header.
func (s *serverStream) replay(ctx context.Context) error {
	_ = s.conn.CloseResponse()
	c := s.next(ctx, s.spec)
	s.conn = c
	h := c.RequestHeader()
	for k, v := range s.first.RequestHeader() {
		// What the new attempt has already, connect or the interceptors
		// after this one set for it (its own traceparent, say).
		if _, own := h[k]; !own && !slices.Contains(timeoutKeys, k) {
			h[k] = slices.Clone(v)
		}
	}
	h[previousAttemptsKey] = []string{strconv.Itoa(s.attempts - 1)}
	// connect sends a server stream's request, and waits for the response
	// headers, in Send: a hung attempt is cut there, as the first is in
	// [serverStream.Send], and Receive reports the timeout.
	if err := s.cut(c.Send(s.msg)); err != nil && !errors.Is(err, io.EOF) {
		// A client-side failure, such as a message that cannot be marshaled.
		return err
	}
	return s.cut(c.CloseRequest())
}

// cut returns nil for the error of an attempt that its per-attempt timer
// cut while its request was being sent (connect may wait for the response
// headers there): Receive then reports the timeout, and the retry loop
// retries it. Other errors are returned as they are.
func (s *serverStream) cut(err error) error {
	if err != nil && s.timer != nil && perattempt.TimedOut(s.ctx, s.tctx) {
		return nil
	}
	return err
}

func (s *serverStream) ResponseHeader() http.Header {
	s.raise()
	// Headers handed to the application commit the call to this attempt.
	s.commitFirst("response header read")
	return s.conn.ResponseHeader()
}

func (s *serverStream) ResponseTrailer() http.Header {
	s.raise()
	s.commitFirst("response trailer read")
	return s.conn.ResponseTrailer()
}

func (s *serverStream) CloseResponse() error {
	defer s.raise() // once the response is closed: nothing is left open
	s.commitFirst("")
	// Closed by the caller: whatever it had read is the call's result.
	s.ended(io.EOF)
	err := s.conn.CloseResponse()
	if s.tcancel != nil {
		s.tcancel()
	}
	if s.cancel != nil {
		s.cancel()
	}
	return err
}

// onceConn is a stream that is not retried but must see its end: to
// release the method timeout when its response is closed, or to count the
// call against the throttle when it ends (see countUnpoliced).
type onceConn struct {
	connect.StreamingClientConn
	cancel   context.CancelFunc // nil without a method timeout
	throttle *rebound.Throttle  // nil when not counted
	counted  sync.Once
}

func (c *onceConn) Receive(m any) error {
	err := c.StreamingClientConn.Receive(m)
	if err != nil && c.throttle != nil {
		c.counted.Do(func() {
			failure := err
			if errors.Is(err, io.EOF) {
				failure = nil // the stream ended OK
			}
			countUnpoliced(c.throttle, failure, c.ResponseTrailer())
		})
	}
	return err
}

func (c *onceConn) CloseResponse() error {
	err := c.StreamingClientConn.CloseResponse()
	if c.cancel != nil {
		c.cancel()
	}
	return err
}

// errConn is a stream that fails every operation with err, for an
// Interceptor with an invalid option. Nothing is sent.
type errConn struct {
	spec                     connect.Spec
	err                      error
	request, header, trailer http.Header
}

func newErrConn(spec connect.Spec, err error) *errConn {
	return &errConn{spec: spec, err: err, request: make(http.Header), header: make(http.Header), trailer: make(http.Header)}
}

func (c *errConn) Spec() connect.Spec           { return c.spec }
func (c *errConn) Peer() connect.Peer           { return connect.Peer{} }
func (c *errConn) Send(any) error               { return c.err }
func (c *errConn) CloseRequest() error          { return c.err }
func (c *errConn) Receive(any) error            { return c.err }
func (c *errConn) CloseResponse() error         { return c.err }
func (c *errConn) RequestHeader() http.Header   { return c.request }
func (c *errConn) ResponseHeader() http.Header  { return c.header }
func (c *errConn) ResponseTrailer() http.Header { return c.trailer }
