package grpcretry

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/distinct"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/perattempt"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// UnaryClientInterceptor returns the interceptor that retries or hedges
// unary calls per the method's policy. It is safe for concurrent use.
//
// Under a hedgingPolicy (A6 "Hedging Policy") the first attempt goes at
// once and each further one hedgingDelay later, while attempts remain and
// the throttle allows; a non-fatal status sends the next one at once, and
// server pushback delays or stops them. The first OK answer wins and the
// other attempts are cancelled; a fatal status cancels them all. The call
// returns once every attempt has ended: with the winner's reply, header,
// trailer and peer in the caller's reply and call options, or with an
// error carrying the status of the attempt that ended last, whose
// header, trailer and peer the options receive. Each hedge carries
// grpc-previous-rpc-attempts, and each attempt's context the backends the
// call has used so far, from which the rebound_distinct balancer sends
// hedges, and retries alike, to backends not used yet (see package grpcretry/distinct for the
// calls that start before the process has such a balancer). A reply that
// is not a non-nil pointer cannot be given to several attempts: such a
// call is made once. [WithAdaptiveHedging] makes the delay follow the
// method's latency.
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return c.unary
}

func (c *Client) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	n, ov, opts := callOptions(opts)
	t, cp, err := c.resolve(ctx, method, cc, ov)
	if err != nil {
		return err
	}
	switch {
	case ov != nil: // the call's own policy
	case cp.m.plain:
		return c.retried(ctx, t, cp, cp.m.policy, method, req, reply, cc, invoker, opts, n)
	case cp.m.bare:
		if n != nil {
			*n = 1
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	// The rest in a function of its own: its frame, which grows with the
	// state of a call the loop runs, is not set up for the common cases.
	return c.policed(ctx, t, cp, method, req, reply, cc, invoker, opts, n)
}

// policed makes a call that is neither plain nor bare (see methodEntry):
// under a hedging policy, a call's override, settings of its method
// config, or a client that traces, meters, limits the rate or gates
// attempts.
func (c *Client) policed(ctx context.Context, t *target, cp callPolicy, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, n *int) error {
	if c.opts.RateLimit != nil {
		invoker = limitedInvoker(t.limit, invoker, c.opts.RateLimitQuota)
	}
	if c.opts.AdaptiveThrottle != nil {
		invoker = gatedInvoker(t.gate, invoker)
	}
	mc := cp.mc
	ctx, cancel, opts := callSettings(ctx, mc, opts)
	defer cancel()
	if c.opts.Disabled || mc == nil || (mc.RetryPolicy == nil && mc.HedgingPolicy == nil) {
		if n != nil {
			*n = 1
		}
		if t.cfg.RetryThrottling != nil && !c.opts.Disabled {
			return c.unpoliced(ctx, t, method, req, reply, cc, invoker, opts)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	p := c.policyFor(t, cp)
	if p.err != nil {
		return status.Error(codes.Internal, "grpcretry: "+method+": "+p.err.Error())
	}
	if p.plain && cp.timeout == 0 {
		return c.retried(ctx, t, cp, p, method, req, reply, cc, invoker, opts, n)
	}
	var d observe.Decisions
	d.Reset(c.rec, ctx, method, t.uri)
	ctx, tr := c.callTracker(ctx)
	ctx, span := c.startCall(ctx, method, t)
	var (
		strategy   *rebound.Retrier
		codes      serviceconfig.CodeSet
		timeout    time.Duration
		unbuffered bool
	)
	if p.hedge != nil {
		// A6 "Memory Management": hedges go while the first attempt is
		// in flight, so the request takes its room in the buffer from
		// the start; one that does not fit is sent once, committed.
		size, fits := c.reserveRequest(req, opts)
		defer c.release(size)
		if fits {
			err := c.hedged(ctx, t, cp.m, p, mc, method, req, reply, cc, invoker, opts, n, tr, &d, span)
			endCall(span, err)
			return err
		}
		span.Committed(1, whyTooLarge)
		strategy, codes, unbuffered = p.once, mc.HedgingPolicy.NonFatalStatusCodes, true
	} else {
		// A retried request takes its room at the first failure (see
		// unaryCall.buffer).
		strategy, codes, timeout = p.retry, mc.RetryPolicy.RetryableStatusCodes, cp.timeout
	}
	opts, onFinish := splitOnFinish(opts)
	md := new(callMD)
	// Field by field, not as a composite literal: the compiler builds
	// that aside and copies it in 16-byte moves, each of which stalls
	// on the 8-byte stores it reads (a tenth of the call in a profile).
	var u unaryCall
	u.method, u.req, u.reply, u.cc, u.invoker, u.md, u.codes = method, req, reply, cc, invoker, &md.attemptMD, codes
	u.c, u.tr, u.span, u.timeout = c, tr, span, timeout
	u.unbuffered, u.sized = unbuffered, unbuffered
	u.opts = append(md.buf[:0], opts...)
	u.opts = append(u.opts, grpc.Header(&md.header), grpc.Trailer(&md.trailer))
	md.dctx.Context = ctx
	call := observe.Hooks[struct{}](&d)
	if span != nil {
		call = observe.Traced[struct{}](&d, span)
	}
	_, err := call.Retry(&md.dctx, strategy, u.attempt)
	c.release(u.reserved)
	if n != nil {
		*n = u.attempts
	}
	switch {
	case err == nil && u.tr == nil && u.attempts == 1 && cp.m != nil:
		c.succeeded(cp.m)
	case u.tr == nil && u.retry != nil:
		call := u.tally.Call(method, t.uri, false, observe.Reason(err))
		if cp.m != nil {
			c.rec.EndOf(ctx, *c.stats(cp.m), &call)
		} else {
			c.rec.End(ctx, &call)
		}
	default:
		c.record(ctx, method, t.uri, u.tr, u.attempts, false, err)
	}
	err = u.result(ctx, err)
	endCall(span, err)
	for _, f := range onFinish {
		f(err)
	}
	return err
}

// retried makes a call under a plain retry policy (see policyEntry.plain)
// without a per-attempt timeout, the common case; cp.m is the method's
// entry, as resolve returns it. The first attempt needs none of the loop:
// it is made here, and a call that succeeds at once returns with what the
// loop would have recorded (the budget's success, the call in the
// statistics). A first attempt that fails is handed to the loop as its
// first attempt's result, and judged there.
func (c *Client) retried(ctx context.Context, t *target, cp callPolicy, p *policyEntry, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, n *int) error {
	opts, onFinish := splitOnFinish(opts)
	var (
		md   *attemptMD
		actx = ctx // the attempts' context
	)
	if len(opts) <= 1 && !distinct.InUse() {
		// A generated stub's one option (grpc.StaticMethod) and the
		// call's two in 64 bytes, where callMD takes 112: the size of
		// this allocation is most of what a call that succeeds at once
		// costs, in the allocator and the garbage collector.
		pm := new(plainMD)
		md, opts = &pm.attemptMD, append(pm.buf[:0], opts...)
	} else {
		cm := new(callMD)
		cm.dctx.Context = ctx
		md, opts, actx = &cm.attemptMD, append(cm.buf[:0], opts...), &cm.dctx
	}
	opts = append(opts, grpc.Header(&md.header), grpc.Trailer(&md.trailer))
	err := invoker(actx, method, req, reply, cc, opts...)
	if err == nil {
		firstSuccess(p.retry)
		if n != nil {
			*n = 1
		}
		c.succeeded(cp.m)
		for _, f := range onFinish {
			f(nil)
		}
		return nil
	}
	var u unaryCall
	u.method, u.req, u.reply, u.cc, u.invoker, u.md, u.codes = method, req, reply, cc, invoker, md, cp.mc.RetryPolicy.RetryableStatusCodes
	u.c, u.opts, u.made = c, opts, err
	var d observe.Decisions
	d.Reset(c.rec, ctx, method, t.uri)
	call := observe.Hooks[struct{}](&d)
	_, err = call.Retry(actx, p.retry, u.attempt)
	c.release(u.reserved)
	if n != nil {
		*n = u.attempts
	}
	st := u.tally.Call(method, t.uri, false, observe.Reason(err))
	c.rec.EndOf(ctx, *c.stats(cp.m), &st)
	err = u.result(ctx, err)
	for _, f := range onFinish {
		f(err)
	}
	return err
}

// firstSuccess records a call whose first attempt succeeded, made
// without a token: what p.RecordSuccess records for the first attempt's
// token, a success in p's budget (as rebound.Do does for a built-in
// strategy).
func firstSuccess(p *rebound.Retrier) {
	if b := p.Budget(); b != nil {
		b.RecordSuccess()
	}
}

// unpoliced makes a call that no policy governs once, and counts it
// against the throttle of its server name (see a6.CountUnpoliced).
func (c *Client) unpoliced(ctx context.Context, t *target, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	if t.throttle == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var trailer metadata.MD
	err := invoker(ctx, method, req, reply, cc, append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))...)
	a6.CountUnpoliced(t.throttle, err == nil, trailer[a6.PushbackHeader])
	return err
}

// splitOnFinish takes the grpc.OnFinish options out of opts, so that their
// callbacks run once for the call rather than once per attempt. Without
// any, opts is returned as is.
func splitOnFinish(opts []grpc.CallOption) ([]grpc.CallOption, []func(error)) {
	found := false
	for _, o := range opts {
		if _, ok := o.(grpc.OnFinishCallOption); ok {
			found = true
			break
		}
	}
	if !found {
		return opts, nil
	}
	var kept []grpc.CallOption
	var fs []func(error)
	for _, o := range opts {
		if f, ok := o.(grpc.OnFinishCallOption); ok {
			fs = append(fs, f.OnFinish)
			continue
		}
		kept = append(kept, o)
	}
	return kept, fs
}

// record ends a call's statistics. tr may be nil when the call needed no
// tracker: then it made attempts attempts, all but the last failed.
func (c *Client) record(ctx context.Context, method, target string, tr *observe.Tracker, attempts int, hedged bool, err error) {
	var reason error
	if err != nil {
		reason = observe.Reason(err)
	}
	var call observe.Call
	if tr != nil {
		call = tr.Call(method, target, hedged, reason)
	} else {
		call = observe.Call{Method: method, Target: target, Attempts: attempts, Hedged: hedged, Reason: reason}
	}
	c.rec.End(ctx, &call)
}

// unaryCall is the state of one retried unary call. It lives on the
// caller's stack; what grpc-go must reach is in md, the call's one heap
// allocation.
type unaryCall struct {
	method     string
	req, reply any
	cc         *grpc.ClientConn
	invoker    grpc.UnaryInvoker
	opts       []grpc.CallOption
	codes      serviceconfig.CodeSet
	md         *attemptMD
	c          *Client
	tr         *observe.Tracker  // with metrics on, for callStats too; else nil
	unbuffered bool              // the request did not fit the buffer: committed
	span       *observe.CallSpan // nil unless the client traces
	timeout    time.Duration     // per attempt, until it commits; 0 for none

	attempts int
	made     error         // the first attempt's error, when it was made before the loop (see Client.retried)
	last     error         // the last attempt's status error
	sized    bool          // the request has been measured against the buffer limits
	reserved int           // the bytes of the client's total buffer the request took
	retry    *retryState   // made at the first failure
	tally    observe.Tally // without metrics, what the attempts did, from the first failure
}

// retryState is what a call needs once its first attempt has failed, in
// one allocation where each would take its own: the first failure and the
// second attempt's context.
type retryState struct {
	first  a6.Failure
	second previousCtx
}

// attemptMD receives an attempt's header and trailer. It lives in a
// callMD or a plainMD, with the call options that point into it: the
// call's one heap allocation, whose size is most of what a call that
// succeeds at once costs, in allocation and garbage collection: every
// byte is paid on each call.
type attemptMD struct {
	header, trailer metadata.MD
}

// callMD holds the call options of the common case without another
// allocation (two of the caller's, a generated stub's grpc.StaticMethod
// and one more, and the call's two), and the call's context.
type callMD struct {
	attemptMD
	buf [4]grpc.CallOption
	// Under rebound_distinct, the call's attempts go to distinct
	// backends; the context that records them lives here, at no further
	// allocation.
	dctx distinct.Context
}

// plainMD is callMD for a call that has at most one option of the
// caller's and needs no record of its backends: no rebound_distinct
// balancer has been built in the process (see distinct.InUse).
type plainMD struct {
	attemptMD
	buf [3]grpc.CallOption
}

// attempt makes one attempt of a retried call.
func (u *unaryCall) attempt(ctx context.Context) (struct{}, error) {
	u.attempts++
	switch {
	case u.attempts == 2:
		ctx = withPreviousAttemptsIn(ctx, 1, &u.retry.second)
		u.start(u.c.now())
	case u.attempts > 2:
		ctx = withPreviousAttempts(ctx, u.attempts-1)
		u.start(u.c.now())
	case u.tr != nil:
		u.tr.Start(time.Time{})
	}
	if u.made != nil {
		// Client.retried made the first attempt, in the plain case:
		// no span, no verdict, no per-attempt timeout.
		err := u.made
		u.made = nil
		return u.judge(err, false, nil, nil)
	}
	u.md.header, u.md.trailer = nil, nil
	ctx, as := startAttempt(ctx, u.span, u.attempts)
	ctx, v := u.c.opts.awaitVerdict(ctx)
	actx, cancel := perattempt.WithDeadline(ctx, u.timeout)
	err := u.invoker(actx, u.method, u.req, u.reply, u.cc, u.opts...)
	timedOut := err != nil && perattempt.Cut(ctx, actx, u.timeout)
	cancel()
	return u.judge(err, timedOut, as, v)
}

// judge ends an attempt whose invoker returned err: a success, or a
// failure classified for the loop. as is the attempt's span and v its
// verdict, nil when the call has neither.
func (u *unaryCall) judge(err error, timedOut bool, as *observe.AttemptSpan, v *ratelimit.Verdict) (struct{}, error) {
	// endAttempt checks as itself, but its RetryInfo argument is a
	// large copy to make for nothing.
	if err == nil {
		if as != nil {
			endAttempt(as, nil, rebound.RetryInfo{}, false)
		}
		return struct{}{}, nil
	}
	// A request that cannot be sent again commits the call. So do
	// headers before the status, which mean the response had started
	// (A6; trailers-only responses leave header nil), unless the
	// attempt's timer cut it: a unary attempt is bounded as a whole
	// (perattempt.WithDeadline), so one cut by its timer delivered
	// nothing, whatever came before, and is retried as any cut attempt
	// is.
	committed := u.unbuffered
	if !committed && !u.sized {
		committed = !u.buffer()
	}
	headers := u.md.header != nil && !timedOut
	// The failure is classified where the loop will read it: the first
	// in the call's retry state, made now, a later one in its own.
	first := u.retry == nil
	var f *a6.Failure
	if first {
		u.retry = new(retryState)
		f = &u.retry.first
	} else {
		f = new(a6.Failure)
	}
	if timedOut {
		err, f.Info = newTimeoutError(u.timeout), perattempt.Info(committed)
		v.Release() // no classifier judged the answer, if one came
	} else {
		retryable := u.codes.Has(serviceconfig.Code(status.Code(err)))
		f.Info = u.c.opts.verdict(v, u.method, a6.Info(retryable, u.md.trailer[a6.PushbackHeader], committed || headers), err, u.md.header, u.md.trailer)
	}
	f.Err, u.last = err, err
	if headers {
		as.Committed(whyHeaders)
	}
	if as != nil {
		endAttempt(as, err, f.Info, false)
	}
	if first && u.tr == nil {
		u.tally.Start(time.Time{}) // the first attempt, not noted until now
	}
	u.failed(u.c.now(), f.Info.HasRetryAfter, timedOut)
	return struct{}{}, f
}

// start notes the start of a retry at now: on the tracker with metrics
// on, else on the tally.
func (u *unaryCall) start(now time.Time) {
	if u.tr != nil {
		u.tr.Start(now)
	} else {
		u.tally.Start(now)
	}
}

// failed notes the failure of the latest attempt at now, as start does;
// pushback says it carried a pushback delay.
func (u *unaryCall) failed(now time.Time, pushback, timedOut bool) {
	if u.tr != nil {
		if timedOut {
			u.tr.TimedOut()
		}
		u.tr.Failed(u.attempts, rebound.RetryInfo{HasRetryAfter: pushback}, now)
		return
	}
	if timedOut {
		u.tally.TimedOut()
	}
	u.tally.Failed(u.attempts, pushback, now)
}

// buffer takes the request's room in the buffer limits (A6 "Memory
// Management") at the call's first failure, when a retry may need it, and
// reports whether it fits; one that does not commits the call. The request
// is the application's, unchanged for the whole call and never copied, so
// until an attempt has failed it holds no memory on retries' account, and
// the size measured now is the one every attempt sends: a call that
// succeeds at once does not measure it at all.
func (u *unaryCall) buffer() bool {
	u.sized = true
	n, fits := u.c.reserveRequest(u.req, u.opts)
	u.reserved = n
	if !fits {
		u.unbuffered = true
		u.span.Committed(u.attempts, whyTooLarge)
	}
	return fits
}

// result turns the engine's verdict into the call's error.
func (u *unaryCall) result(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	// The loop's own error first, without the allocation errors.As
	// makes of its target.
	re, ok := err.(*rebound.Error)
	if !ok {
		var wrapped *rebound.Error
		if !errors.As(err, &wrapped) {
			return err
		}
		re = wrapped
	}
	last := u.last
	if last == nil || ctx.Err() != nil && re.Reason == context.Cause(ctx) {
		// The caller's context ended the call, perhaps while it waited
		// between attempts: its status is the call's, as in grpc-go.
		last = status.FromContextError(ctx.Err()).Err()
	}
	return newCallError(last, re.Attempts, re.Reason)
}
