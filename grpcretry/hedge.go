package grpcretry

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/distinct"
	"github.com/rebound-go/rebound/internal/hedgehook"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/serviceconfig"
)

// hedged makes a unary call under mc's hedgingPolicy (A6 "Hedging Policy"):
// rebound.Hedge runs the attempts, this adapts them to grpc-go.
//
// Attempts run at the same time, so each decodes into a reply of its own
// and captures its own header, trailer and peer; attempt 1 decodes straight
// into the caller's reply, which saves a copy when it wins. Once every
// attempt has returned, the winner's reply is copied into the caller's
// (proto.Reset and proto.Merge for proto messages, a shallow copy of the
// pointed-to value otherwise), and the caller's grpc.Header, grpc.Trailer
// and grpc.Peer options receive the winner's values, or those of the
// attempt whose failure is returned; grpc.OnFinish callbacks run once, with
// the call's error. A reply that is not a non-nil pointer cannot be
// duplicated: such a call is made once, without hedges.
//
// The context of every attempt carries a [distinct.Call], so that the
// rebound_distinct balancer sends the hedges to backends not used yet.
func (c *Client) hedged(ctx context.Context, t *target, m *methodEntry, p *policyEntry, mc *serviceconfig.MethodConfig, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, n *int, tr *observe.Tracker, d *observe.Decisions, span *observe.CallSpan) error {
	h := &hedgedCall{method: method, req: req, cc: cc, invoker: invoker, codes: mc.HedgingPolicy.NonFatalStatusCodes, span: span, client: &c.opts, statsHeaders: &t.statsHeaders}
	h.tr = tr
	if h.tr == nil {
		h.tr = &h.trk
	}
	if !h.setReply(reply) {
		if n != nil {
			*n = 1
		}
		ctx, as := startAttempt(ctx, span, 1)
		err := invoker(ctx, method, req, reply, cc, opts...)
		endAttempt(as, err, rebound.RetryInfo{}, false)
		return err
	}
	var wb writeBack
	h.opts, wb = splitWriteBack(opts)
	h.peer = len(wb.peers) > 0

	hedger := p.hedge
	var am *adaptiveMethod
	if c.opts.adaptive != nil {
		var err error
		if am, err = c.adaptive(t, p, mc, method); err != nil {
			return status.Error(codes.Internal, "grpcretry: "+method+": "+err.Error())
		}
		hedger = am.hedger
		am.cap.deposit()
	}
	// The record of the backends used lives in h, at no further
	// allocation.
	h.dctx.Context = ctx
	ctx = &h.dctx
	var start time.Time
	if am != nil {
		start = am.clock.Now()
	}
	// h holds the call's decisions, so that the caller's copy stays on
	// its stack.
	h.d = *d
	if p.budget != nil || am != nil {
		// To hear of a hedge the budget refuses, for Stats. Without a
		// budget none is refused, and the call needs no hook.
		h.d.Tracker = h.tr
	}
	call := observe.Hooks[*hedgeAttempt](&h.d)
	if span != nil {
		call = observe.Traced[*hedgeAttempt](&h.d, span)
	}
	won, err := call.Hedge(ctx, hedger, h.attempt)
	if n != nil {
		*n = int(h.sent.Load())
	}
	if err == nil && tr == nil && h.d.Tracker == nil && h.sent.Load() == 1 && m != nil {
		// Attempt 1 answered, and nothing else happened that the call's
		// statistics would tell: no budget could refuse a hedge, and
		// without metrics no transparent retry is counted.
		c.succeeded(m)
	} else {
		c.record(ctx, method, t.uri, h.tr, int(h.sent.Load()), true, err)
	}
	if err == nil {
		if am != nil {
			now := am.clock.Now()
			am.lat.record(now, now.Sub(start))
		}
		if won != &h.first {
			h.copyReply(reply, won.reply)
		}
		wb.fill(won)
		wb.finish(nil)
		return nil
	}
	from, err := h.result(ctx, err)
	if from != nil {
		wb.fill(from)
	}
	wb.finish(err)
	return err
}

// hedgedCall is the state of one hedged unary call, shared by its attempts.
// Only the attempts' counter changes while they run.
type hedgedCall struct {
	method  string
	req     any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	codes   serviceconfig.CodeSet
	opts    []grpc.CallOption // the caller's, without those writeBack handles
	peer    bool              // the caller asked for the peer

	// The type of the reply: a proto message type, or else the type a
	// plain pointer points to.
	msgType  protoreflect.MessageType
	elemType reflect.Type

	first  hedgeAttempt     // attempt 1: decodes into the caller's reply
	dctx   distinct.Context // the call's context, with the backends its attempts went to
	d      observe.Decisions
	sent   atomic.Int32
	tr     *observe.Tracker // the call's, with metrics on; else &trk
	trk    observe.Tracker
	span   *observe.CallSpan // nil unless the client traces
	client *options          // the client's settings, for its verdict

	statsHeaders *atomic.Bool // the target's: callStats hands the attempts their headers
}

// hedgeAttempt is what one attempt receives.
type hedgeAttempt struct {
	reply           any
	header, trailer metadata.MD
	peer            peer.Peer
	buf             [8]grpc.CallOption
	in              headerContext
}

// headerContext is the context a hedged attempt goes to grpc-go with:
// callStats finds it there and hands it the attempt's response headers and
// trailer as they arrive. The headers commit the call to the attempt (A6).
// grpc-go copies both for a stats handler anyway, so once callStats is
// known to be on the conn they are the attempt's header and trailer, and
// the attempt does not ask for second copies with grpc.Header and
// grpc.Trailer.
type headerContext struct {
	context.Context
	header, trailer atomic.Pointer[metadata.MD] // set by callStats
	seen            *atomic.Bool                // the target's statsHeaders
}

type headerKey struct{}

func (c *headerContext) Value(key any) any {
	if key == (headerKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// received takes the attempt's response headers, from callStats, and
// commits the call to this attempt when no other attempt has: the commit is
// traced before the other attempts are cancelled, and so before they end.
func (c *headerContext) received(md *metadata.MD) {
	c.header.Store(md)
	c.sawStats()
	hedgehook.Commit(c, committedHeaders)
}

// committedHeaders traces the commit of ctx's attempt by its response
// headers.
func committedHeaders(ctx context.Context) { attemptSpan(ctx).Committed(whyHeaders) }

// receivedTrailer takes the attempt's trailer, from callStats.
func (c *headerContext) receivedTrailer(md *metadata.MD) {
	c.trailer.Store(md)
	c.sawStats()
}

func (c *headerContext) sawStats() {
	if !c.seen.Load() {
		c.seen.Store(true)
	}
}

// setReply records how to make replies like reply, and reports whether it
// can: reply must be a non-nil pointer.
func (h *hedgedCall) setReply(reply any) bool {
	h.first.reply = reply
	if m, ok := reply.(proto.Message); ok {
		r := m.ProtoReflect()
		h.msgType = r.Type()
		return r.IsValid()
	}
	v := reflect.ValueOf(reply)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return false
	}
	h.elemType = v.Type().Elem()
	return true
}

func (h *hedgedCall) newReply() any {
	if h.msgType != nil {
		return h.msgType.New().Interface()
	}
	return reflect.New(h.elemType).Interface()
}

func (h *hedgedCall) copyReply(dst, src any) {
	if h.msgType != nil {
		d := dst.(proto.Message)
		proto.Reset(d)
		proto.Merge(d, src.(proto.Message))
		return
	}
	reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(src).Elem())
}

// attempt makes attempt number n; it is the op of rebound.Hedge.
func (h *hedgedCall) attempt(ctx context.Context, n int) (*hedgeAttempt, error) {
	h.sent.Add(1)
	h.tr.Start(time.Time{}) // hedges overlap: no delay to measure
	a := &h.first
	if n > 1 {
		a = &hedgeAttempt{reply: h.newReply()}
		ctx = withPreviousAttempts(ctx, n-1)
	}
	opts := append(a.buf[:0], h.opts...)
	statsHeaders := h.statsHeaders.Load()
	if !statsHeaders {
		opts = append(opts, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	}
	if h.peer {
		opts = append(opts, grpc.Peer(&a.peer))
	}
	ctx, as := startAttempt(ctx, h.span, n)
	ctx, v := h.client.awaitVerdict(ctx)
	a.in.Context, a.in.seen = ctx, h.statsHeaders
	err := h.invoker(&a.in, h.method, h.req, a.reply, h.cc, opts...)
	if statsHeaders {
		// callStats had them before grpc-go ended the attempt.
		if md := a.in.header.Load(); md != nil {
			a.header = *md
		}
		if md := a.in.trailer.Load(); md != nil {
			a.trailer = *md
		}
	}
	if err == nil {
		endAttempt(as, nil, rebound.RetryInfo{}, h.span.Lost(ctx))
		return a, nil
	}
	nonFatal := h.codes.Has(serviceconfig.Code(status.Code(err)))
	// Headers before the status mean the response had started: A6
	// commits the call to this attempt.
	info := h.client.verdict(v, h.method, a6.Info(nonFatal, a.trailer[a6.PushbackHeader], a.header != nil), err, a.header, a.trailer)
	if a.header != nil {
		as.Committed(whyHeaders)
	}
	endAttempt(as, err, info, h.span.Lost(ctx))
	if ctx.Err() == nil { // a loser cancelled by the winner did not fail
		h.tr.Failed(n, info, time.Time{})
	}
	return nil, &attemptError{err: err, attempt: a, info: info}
}

// result turns the engine's verdict into the call's error, and returns the
// attempt whose status that error carries, if any.
func (h *hedgedCall) result(ctx context.Context, err error) (*hedgeAttempt, error) {
	var re *rebound.Error
	if !errors.As(err, &re) {
		return nil, err
	}
	var last error
	var ae *attemptError
	if errors.As(re.Err, &ae) {
		last = ae.err
	}
	if ctx.Err() != nil && (last == nil || re.Reason == context.Cause(ctx)) {
		// The call's deadline or cancellation ended the attempts still
		// in flight: that is the call's status, as without hedging.
		last, ae = status.FromContextError(ctx.Err()).Err(), nil
	}
	var from *hedgeAttempt
	if ae != nil {
		from = ae.attempt
	}
	return from, newCallError(last, re.Attempts, re.Reason)
}

// attemptError is a failed attempt's status error, classified for
// rebound.Hedge, with what the attempt received.
type attemptError struct {
	err     error
	attempt *hedgeAttempt
	info    rebound.RetryInfo
}

func (e *attemptError) Error() string                { return e.err.Error() }
func (e *attemptError) Unwrap() error                { return e.err }
func (e *attemptError) RetryInfo() rebound.RetryInfo { return e.info }

// writeBack holds the caller's call options that grpc-go fills in when an
// attempt ends. Concurrent attempts must not share them, so they are taken
// out of each attempt's options and filled once, at the end.
type writeBack struct {
	headers, trailers []*metadata.MD
	peers             []*peer.Peer
	onFinish          []func(error)
}

// splitWriteBack returns opts without the options writeBack handles, and
// those options. Without any, opts is returned as is.
func splitWriteBack(opts []grpc.CallOption) ([]grpc.CallOption, writeBack) {
	var wb writeBack
	found := 0
	for _, o := range opts {
		switch o.(type) {
		case grpc.HeaderCallOption, grpc.TrailerCallOption, grpc.PeerCallOption, grpc.OnFinishCallOption:
			found++
		}
	}
	if found == 0 {
		return opts, wb
	}
	kept := make([]grpc.CallOption, 0, len(opts)-found)
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			wb.headers = append(wb.headers, o.HeaderAddr)
		case grpc.TrailerCallOption:
			wb.trailers = append(wb.trailers, o.TrailerAddr)
		case grpc.PeerCallOption:
			wb.peers = append(wb.peers, o.PeerAddr)
		case grpc.OnFinishCallOption:
			wb.onFinish = append(wb.onFinish, o.OnFinish)
		default:
			kept = append(kept, o)
		}
	}
	return kept, wb
}

// fill gives the caller's header, trailer and peer options what a
// received.
func (wb *writeBack) fill(a *hedgeAttempt) {
	for _, p := range wb.headers {
		*p = a.header
	}
	for _, p := range wb.trailers {
		*p = a.trailer
	}
	for _, p := range wb.peers {
		*p = a.peer
	}
}

// finish runs the caller's OnFinish callbacks with the call's error.
func (wb *writeBack) finish(err error) {
	for _, f := range wb.onFinish {
		f(err)
	}
}
