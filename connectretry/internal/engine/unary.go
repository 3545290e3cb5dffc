package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/gopanic"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/perattempt"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Unary is one unary call, kept on its front door's stack. The front door
// starts it ([Unary.Start]), tells it the server of its first attempt
// ([Unary.Opened]), and makes its attempts through [Once], [Retry] or
// [Hedge], whichever [Unary.Mode] says. An attempt made through Once or
// Retry goes: ctx := u.Begin(ctx); build or open the attempt's request
// with ctx; u.Admit(); send it; u.End(err, pushback, meta). A hedged attempt
// does the same with its [HedgeAttempt]. A front door that must open its
// first attempt to learn the server (connect v2 tells the peer only once a
// stream is open) calls Begin for it before Opened, and Begin returns that
// attempt's context again when the attempt runs.
type Unary struct {
	i         *Interceptor
	procedure string
	p         Policy
	cancel    context.CancelFunc // the method timeout's; nil for none
	n         *int               // CountAttempts's; nil for none
	policed   bool               // a retry or hedging policy governs the call
	t         *Target            // known once Opened
	entry     *policyEntry       // the call's strategy, once Opened, when policed
	span      *observe.CallSpan  // nil unless the interceptor traces
	attempts  int
	// tr follows the attempts from the first failure on. It is made then,
	// not held by value: a Tracker's lock would move the whole Unary to
	// the heap, an allocation on every call's success path.
	tr *observe.Tracker

	// The attempt in flight, of a call made once or retried.
	pending bool            // Begin has run for it ahead of the retry loop
	pctx    context.Context // the context it was made from: the call's
	actx    context.Context
	acancel context.CancelFunc
	as      *observe.AttemptSpan
	v       *ratelimit.Verdict
	adm     admission
}

// Mode is how a unary call runs.
type Mode int

// The modes of a unary call.
const (
	ModeOnce  Mode = iota // no policy: one attempt
	ModeRetry             // a retryPolicy: through [Retry]
	ModeHedge             // a hedgingPolicy: through [Hedge]
)

// Start starts a unary call of procedure made with ctx, and returns the
// call's context: ctx with the method's timeout and, when traced, the
// call's span. addr is the server's address when the front door knows it
// before any attempt (for the span), else "". An invalid Override fails
// the call here, before any attempt. Call Stop when the call ends.
func (u *Unary) Start(i *Interceptor, ctx context.Context, procedure, addr string) (context.Context, error) {
	u.i, u.procedure, u.n = i, procedure, attemptsOut(ctx)
	p, err := i.resolve(ctx, procedure)
	if err != nil {
		return ctx, err
	}
	u.p = p
	if len(p.clamped) > 0 {
		name := i.opts.ServerName
		if name == "" {
			name = addr
		}
		i.logClamped(ctx, procedure, name, p.clamped)
	}
	ctx, u.cancel = withTimeout(ctx, p.mc)
	u.policed = p.retried(i.opts.Disabled)
	if !u.policed {
		if u.n != nil {
			*u.n = 1
		}
		return ctx, nil
	}
	if i.tracer != nil {
		ctx, u.span = i.tracer.StartRPC(ctx, procedure, addr)
	}
	return ctx, nil
}

// Stop releases the call's method timeout.
func (u *Unary) Stop() {
	if u.cancel != nil {
		u.cancel()
	}
}

// Mode returns how the call runs.
func (u *Unary) Mode() Mode {
	switch {
	case !u.policed:
		return ModeOnce
	case u.p.mc.HedgingPolicy != nil:
		return ModeHedge
	}
	return ModeRetry
}

// Opened tells the call the address of the server its first attempt goes
// to, which names its throttles (unless WithServerName did). It fails when
// the call's strategy cannot be made (possible only with a service config
// built by hand); the call then ends with that error, and nothing is sent.
func (u *Unary) Opened(addr string) error {
	if u.t != nil {
		return nil
	}
	if !u.policed && !u.i.gated() && !u.i.countsUnpoliced() {
		return nil // nothing per server name applies
	}
	u.t = u.i.Target(addr)
	if !u.policed {
		return nil
	}
	u.entry = u.i.policyFor(u.t, u.p)
	if u.entry.err != nil {
		if u.n != nil {
			*u.n = 0
		}
		err := u.i.policyError(u.procedure, u.entry.err)
		u.Abandon(err)
		return err
	}
	return nil
}

// Abandon ends a call that makes no attempt after all, with err: its
// first attempt, begun ahead of the retry loop, could not be opened or
// its strategy made, or the application closed it unsent.
func (u *Unary) Abandon(err error) {
	if u.acancel != nil {
		u.acancel()
	}
	u.pending = false
	u.i.endAttempt(u.as, err, false)
	u.i.endCall(u.span, err)
}

// Watched reports whether the call needs the engine at all: a policy
// governs it, or it has a method timeout to release, gates to pass or a
// throttle to count against. A front door makes any other call as if
// there were no Interceptor.
func (u *Unary) Watched() bool {
	return u.policed || u.cancel != nil || u.i.gated() || u.i.countsUnpoliced()
}

// Begin starts the call's next attempt, made once or retried, and returns
// its context: ctx with the attempt's span, its per-attempt deadline (the
// earlier of its start plus the timeout and the call's deadline, sent to
// the server with the request, so that it drops work the client has given
// up on), and a place for the classifier's verdict.
func (u *Unary) Begin(ctx context.Context) context.Context {
	if u.pending {
		u.pending = false
		return u.actx
	}
	u.attempts++
	u.pctx = ctx
	if !u.policed {
		u.actx = ctx
		return ctx
	}
	if u.attempts > 1 {
		u.tr.Start(u.i.clock().Now()) // an attempt failed before: tr is set
	}
	ctx, u.as = u.span.StartAttempt(ctx, u.attempts)
	ctx, u.v = u.i.awaitVerdict(ctx)
	u.actx, u.acancel = perattempt.WithDeadline(ctx, u.p.timeout)
	return u.actx
}

// BeginFirst is Begin for the first attempt ahead of the retry loop, for a
// front door that opens it to learn the server: the loop's first Begin
// returns the same context. It does nothing for a hedged call, whose first
// attempt opens with [FirstHedge].
func (u *Unary) BeginFirst(ctx context.Context) context.Context {
	ctx = u.Begin(ctx)
	u.pending = true
	return ctx
}

// RateLimited reports whether the adaptive rate limit hears of the
// call's answers: the pushback header of a success then matters too.
func (u *Unary) RateLimited() bool { return u.i.opts.RateLimit != nil }

// RateLimited is [Unary.RateLimited].
func (a *HedgeAttempt) RateLimited() bool { return a.u.i.opts.RateLimit != nil }

// Attempts returns the number of attempts begun.
func (u *Unary) Attempts() int { return u.attempts }

// Admit lets the attempt in flight go out once the server name's adaptive
// throttle and rate limit allow it (see admission). Its error ends the
// attempt: return End(err, nil).
func (u *Unary) Admit() error {
	if !u.i.gated() {
		return nil
	}
	var err error
	u.adm, err = u.i.admit(u.actx, u.t)
	return err
}

// ReadsQuota reports whether the rate limit reads the quota an answer
// publishes (WithRateLimitQuota): the front door then gives End's attempt
// the answer's fields with Published first.
func (u *Unary) ReadsQuota() bool { return u.i.readsQuota() }

// Published gives the attempt in flight its answer's header fields, for
// the rate limit to read the published quota from.
func (u *Unary) Published(f ratelimit.Fields) { u.adm.fields = f }

// End ends the attempt in flight with err (nil for success), whose answer
// carried the pushback header values pushback and the metadata meta (for
// the classifier), and returns the error to give the retry loop: nil, or
// err as the loop judges it.
func (u *Unary) End(err error, pushback []string, meta Metadata) error {
	u.i.answered(u.actx, &u.adm, err, pushback)
	u.adm = admission{}
	if !u.policed {
		if u.t != nil {
			u.i.CountUnpoliced(u.t, err, pushback)
		}
		return err
	}
	timedOut := err != nil && perattempt.Cut(u.pctx, u.actx, u.p.timeout)
	u.acancel()
	if err == nil {
		u.i.endAttempt(u.as, nil, false)
		return nil
	}
	var ae *a6.Failure
	if timedOut {
		ae = u.i.timeoutError(u.p.timeout)
		u.v.Release() // no classifier judged the answer, if one came
	} else {
		ae = u.i.classify(u.v, err, pushback, meta, u.p.mc.RetryPolicy.RetryableStatusCodes, u.procedure, false)
	}
	u.i.endAttempt(u.as, ae, false)
	if u.tr == nil {
		u.tr = new(observe.Tracker)
		u.tr.Start(time.Time{}) // the first attempt, whose start is not needed
	}
	if timedOut {
		u.tr.TimedOut()
	}
	u.tr.Failed(u.attempts, ae.Info, u.i.clock().Now())
	return ae
}

// Retry runs the call under its retryPolicy: op makes each attempt, as
// [Unary] says, until one succeeds or retrying stops. The error of a call
// that gave up is the major's (see [Major.GaveUp]).
func Retry[R any](ctx context.Context, u *Unary, op func(context.Context) (R, error)) (R, error) {
	d := u.i.rec.Decisions(ctx, u.procedure, u.t.name)
	call := observe.Hooks[R](&d)
	if u.span != nil {
		call = observe.Traced[R](&d, u.span)
	}
	r, err := call.Retry(ctx, u.entry.retry, op)
	if u.n != nil {
		*u.n = u.attempts
	}
	u.i.end(ctx, u.tr, u.attempts, u.procedure, u.t.name, false, err)
	if err != nil {
		err = u.i.giveUp(ctx, err)
		u.i.endCall(u.span, err)
		var zero R
		return zero, err
	}
	u.i.endCall(u.span, nil)
	return r, nil
}

// HedgeAttempt is one attempt of a hedged unary call, made by the op given
// to [Hedge]: Ctx is its context, N its number (1-based). The op opens or
// builds its request with Ctx, calls Admit, sends it, and returns
// End(err, pushback).
type HedgeAttempt struct {
	N   int
	Ctx context.Context

	u      *Unary
	call   context.Context // the call's
	hctx   context.Context // the hedge machinery's context of the attempt
	cancel context.CancelFunc
	stop   func() bool // unregisters the first attempt's link to hctx
	as     *observe.AttemptSpan
	v      *ratelimit.Verdict
	adm    admission
}

// FirstHedge begins the first attempt of a hedged call ahead of the hedge
// machinery, for a front door that opens it to learn the server; pass it
// to [Hedge], which makes it the machinery's first attempt.
func (u *Unary) FirstHedge(ctx context.Context) *HedgeAttempt {
	a := &HedgeAttempt{N: 1, u: u}
	ctx, a.cancel = context.WithCancel(ctx)
	a.begin(ctx)
	return a
}

// Abandon ends a first attempt begun with FirstHedge that the hedge
// machinery will not make: the call ends with err before it runs.
func (a *HedgeAttempt) Abandon(err error) {
	a.cancel()
	a.u.i.endAttempt(a.as, err, false)
	a.u.i.endCall(a.u.span, err)
}

func (a *HedgeAttempt) begin(ctx context.Context) {
	ctx, a.as = a.u.span.StartAttempt(ctx, a.N)
	a.Ctx, a.v = a.u.i.awaitVerdict(ctx)
}

// Admit lets the attempt go out (see [Unary.Admit]).
func (a *HedgeAttempt) Admit() error {
	if !a.u.i.gated() {
		return nil
	}
	var err error
	a.adm, err = a.u.i.admit(a.Ctx, a.u.t)
	return err
}

// ReadsQuota is Unary.ReadsQuota.
func (a *HedgeAttempt) ReadsQuota() bool { return a.u.i.readsQuota() }

// Published is Unary.Published for the hedged attempt a.
func (a *HedgeAttempt) Published(f ratelimit.Fields) { a.adm.fields = f }

// End ends the attempt with err (nil for success), whose answer carried
// the pushback header values pushback and the metadata meta, and returns
// the error to give the hedge machinery: nil, or err as it is judged.
func (a *HedgeAttempt) End(err error, pushback []string, meta Metadata) error {
	i := a.u.i
	i.answered(a.Ctx, &a.adm, err, pushback)
	// An attempt cancelled while the call goes on has lost: the call
	// ended with another attempt.
	lost := a.hctx.Err() != nil && a.call.Err() == nil
	if err != nil {
		ae := i.classify(a.v, err, pushback, meta, a.u.p.mc.HedgingPolicy.NonFatalStatusCodes, a.u.procedure, false)
		i.endAttempt(a.as, ae, lost)
		a.u.tr.Failed(a.N, ae.Info, time.Time{})
		return ae
	}
	if !lost {
		// The first response commits the call to its attempt; any other
		// is cancelled.
		a.as.Committed(whyResponse)
	}
	i.endAttempt(a.as, nil, lost)
	return nil
}

// Hedge runs the call under its hedgingPolicy: op makes each attempt, as
// [HedgeAttempt] says. first is the attempt begun with [Unary.FirstHedge],
// or nil. Hedged attempts overlap, so no delay between them is measured,
// and the clock is not read.
func Hedge[R any](ctx context.Context, cu *Unary, first *HedgeAttempt, op func(*HedgeAttempt) (R, error)) (R, error) {
	// The attempts share the call's state from their goroutines: a copy
	// of it moves to the heap, and the caller's stays on its stack.
	u := new(Unary)
	*u = *cu
	if first != nil {
		first.u = u
	}
	var (
		tr    observe.Tracker
		mu    sync.Mutex
		taken bool
	)
	u.tr = &tr
	hop := func(hctx context.Context, n int) (R, error) {
		tr.Start(time.Time{})
		var a *HedgeAttempt
		mu.Lock()
		if n == 1 && first != nil && !taken {
			taken = true
			a = first
			// The first attempt opened on the call's context: the
			// machinery cancels it through hctx.
			a.stop = context.AfterFunc(hctx, a.cancel)
		}
		mu.Unlock()
		if a == nil {
			a = &HedgeAttempt{N: n, u: u}
			a.begin(hctx)
		}
		a.call, a.hctx = ctx, hctx
		r, err := op(a)
		if a.stop != nil {
			a.stop()
			a.cancel()
		}
		return r, err
	}
	d := u.i.rec.Decisions(ctx, u.procedure, u.t.name)
	d.Tracker = &tr // to hear of a hedge the budget refuses, for Stats
	call := observe.Hooks[R](&d)
	if u.span != nil {
		call = observe.Traced[R](&d, u.span)
	}
	returned := false
	defer func() {
		if !returned {
			// A callback panicked, here (a budget as the call starts, a
			// classifier judging the first attempt) or on a goroutine
			// of the call, whose panic Hedge raises here once every
			// attempt has ended: the call's work ends before the panic
			// reaches the caller. A callback that panics again
			// meanwhile is not heard.
			gopanic.Run(func() {
				err := u.i.major.Error(serviceconfig.Internal, errCrashed)
				mu.Lock()
				untaken := first != nil && !taken
				taken = true
				mu.Unlock()
				if untaken {
					first.cancel()
					u.i.endAttempt(first.as, err, false)
				}
				u.i.endCall(u.span, err)
			}, func(*gopanic.Panic) {})
		}
	}()
	r, err := call.Hedge(ctx, u.entry.hedge, hop)
	returned = true
	if first != nil && !taken {
		// The machinery ended before it made its first attempt.
		first.cancel()
		u.i.endAttempt(first.as, context.Cause(ctx), false)
	}
	// Hedge has waited for every attempt: tr is complete.
	if u.n != nil {
		*u.n = tr.Attempts()
	}
	u.i.end(ctx, &tr, 0, u.procedure, u.t.name, true, err)
	if err != nil {
		err = u.i.giveUp(ctx, err)
		u.i.endCall(u.span, err)
		var zero R
		return zero, err
	}
	u.i.endCall(u.span, nil)
	return r, nil
}

// giveUp turns the retry loop's verdict into the call's error (see
// Major.GaveUp): the last attempt's error, or, when the caller's context
// ended the call, perhaps while it waited between attempts, the context's.
func (i *Interceptor) giveUp(ctx context.Context, err error) error {
	var re *rebound.Error
	if !errors.As(err, &re) {
		return err
	}
	last := re.Err
	var ae *a6.Failure
	if errors.As(last, &ae) {
		last = ae.Err
	}
	if last == nil || ctx.Err() != nil && re.Reason == context.Cause(ctx) {
		last = i.contextError(ctx)
	}
	return i.major.GaveUp(&rebound.Error{Err: last, Attempts: re.Attempts, Reason: re.Reason})
}

// contextError is the error of a call whose context ended before any
// attempt returned.
func (i *Interceptor) contextError(ctx context.Context) error {
	code := serviceconfig.Cancelled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = serviceconfig.DeadlineExceeded
	}
	return i.major.Error(code, context.Cause(ctx))
}
