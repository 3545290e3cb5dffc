package connectretry

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"

	"connectrpc.com/connect/v2"

	"github.com/rebound-go/rebound/connectretry/internal/engine"
)

// unary opens a unary call. connect's Client sends its request, closes the
// request side and receives the response through the stream returned
// here: the attempts run in its Receive, each on a stream of its own.
//
// The first attempt is opened now, as a call without the Interceptor
// would be (its error is the call's), because its transport tells the
// server's address, which names the throttles, only once a stream is
// open. It runs on the caller's connect.CallInfo; a retry, or any hedged
// attempt, gets a CallInfo of its own with a copy of the caller's request
// header, and the one the call ends with is copied into the caller's.
func (i *Interceptor) unary(ctx context.Context, next connect.ClientFunc, spec connect.Spec) (connect.ClientStream, error) {
	var u engine.Unary
	ctx, err := u.Start(i.engine(), ctx, spec.Procedure, "")
	if err != nil {
		return nil, err
	}
	if !u.Watched() {
		return next(ctx, spec)
	}
	us := &unaryStream{u: u, next: next, spec: spec, ctx: ctx, caller: callInfo(ctx)}
	var actx context.Context
	switch us.u.Mode() {
	case engine.ModeHedge:
		us.hedge1 = us.u.FirstHedge(ctx)
		actx, us.info1 = attemptInfo(us.hedge1.Ctx, us.caller, 0)
	default:
		actx = us.u.BeginFirst(ctx)
		if us.caller == nil {
			actx, us.caller = connect.NewClientContext(actx)
		}
		us.info1 = us.caller
	}
	us.first, err = next(actx, spec)
	if err == nil {
		err = us.u.Opened(us.info1.PeerAddr)
		if err != nil {
			// Opened ended the call; the stream is dropped unsent.
			us.u.Stop()
			return nil, err
		}
		return us, nil
	}
	if us.hedge1 != nil {
		us.hedge1.Abandon(err)
	} else {
		us.u.Abandon(err)
	}
	us.u.Stop()
	return nil, err
}

// unaryStream is a unary call, as connect's Client drives it: Send keeps
// the request, and Receive makes the attempts.
type unaryStream struct {
	u      engine.Unary
	next   connect.ClientFunc
	spec   connect.Spec
	ctx    context.Context   // the call's
	caller *connect.CallInfo // the caller's

	first  connect.ClientStream // the first attempt's, opened ahead
	info1  *connect.CallInfo    // its CallInfo
	hedge1 *engine.HedgeAttempt // its engine state, when hedged

	req                            any
	sent, sendClosed, rxEnd, ended bool
	res                            any               // the caller's response message, while Receive runs
	last                           *connect.CallInfo // the CallInfo of the attempt the call ended with
}

func (us *unaryStream) SendHeaders() error { return nil }

func (us *unaryStream) Send(msg any) error {
	switch {
	case us.sendClosed:
		return io.EOF
	case us.sent:
		return errors.New("connectretry: unary stream sent more than once")
	}
	us.req, us.sent = msg, true
	return nil
}

func (us *unaryStream) CloseSend() error {
	us.sendClosed = true
	return nil
}

// Receive makes the call's attempts, into res.
func (us *unaryStream) Receive(res any) error {
	if us.rxEnd {
		return io.EOF
	}
	us.rxEnd, us.res = true, res
	var err error
	switch us.u.Mode() {
	case engine.ModeOnce:
		_, err = us.attempt(us.ctx)
	case engine.ModeRetry:
		_, err = engine.Retry(us.ctx, &us.u, us.attempt)
	case engine.ModeHedge:
		err = us.hedge()
	}
	us.end()
	return err
}

// end copies what the call ended with into the caller's CallInfo, and
// releases the call.
func (us *unaryStream) end() {
	us.ended = true
	us.res = nil
	if us.last != nil && us.last != us.caller {
		copyInfo(us.caller, us.last)
	}
	us.u.Stop()
}

// Close releases a call that was never received: its first attempt, opened
// ahead, is closed as connect would close it.
func (us *unaryStream) Close() error {
	if us.ended {
		return nil
	}
	err := us.first.Close()
	if us.hedge1 != nil {
		us.hedge1.Abandon(context.Canceled)
	} else {
		us.u.Abandon(context.Canceled)
	}
	us.ended = true
	us.u.Stop()
	return err
}

// attempt makes one attempt of a call made once or retried.
func (us *unaryStream) attempt(ctx context.Context) (struct{}, error) {
	actx := us.u.Begin(ctx)
	s, info := us.first, us.info1
	if n := us.u.Attempts(); n > 1 {
		actx, info = attemptInfo(actx, us.caller, n-1)
		var err error
		if s, err = us.next(actx, us.spec); err != nil {
			return struct{}{}, us.u.End(err, nil, info)
		}
	}
	us.last = info
	if err := us.u.Admit(); err != nil {
		// Dropped unsent: connect makes the request on CloseSend.
		return struct{}{}, us.u.End(err, nil, info)
	}
	err := us.exchange(s, us.res)
	var pushback []string
	if err != nil || us.u.RateLimited() {
		pushback = pushbackOf(info)
	}
	return struct{}{}, us.u.End(err, pushback, info)
}

// exchange sends the request on s as the caller did, receives the
// response into res, and closes s.
func (us *unaryStream) exchange(s connect.ClientStream, res any) error {
	defer s.Close()
	if us.sent {
		if err := s.Send(us.req); err != nil {
			return err
		}
	}
	if us.sendClosed {
		if err := s.CloseSend(); err != nil {
			return err
		}
	}
	return s.Receive(res)
}

// hedge makes the call's hedged attempts. Each receives into a response
// message of its own, which the winner's is copied from.
func (us *unaryStream) hedge() error {
	type won struct {
		res  any
		info *connect.CallInfo
	}
	w, err := engine.Hedge(us.ctx, &us.u, us.hedge1, func(a *engine.HedgeAttempt) (won, error) {
		s, info := us.first, us.info1
		if a != us.hedge1 {
			var actx context.Context
			actx, info = attemptInfo(a.Ctx, us.caller, a.N-1)
			var err error
			if s, err = us.next(actx, us.spec); err != nil {
				return won{}, a.End(err, nil, info)
			}
		}
		if err := a.Admit(); err != nil {
			return won{}, a.End(err, nil, info)
		}
		res := engine.NewMessage(us.res)
		if err := us.exchange(s, res); err != nil {
			return won{}, a.End(err, pushbackOf(info), info)
		}
		var pushback []string
		if a.RateLimited() {
			pushback = pushbackOf(info)
		}
		return won{res, info}, a.End(nil, pushback, info)
	})
	if err != nil {
		return err
	}
	us.last = w.info
	if err := engine.CopyMessage(us.res, w.res); err != nil {
		return connect.NewError(connect.CodeInternal, err.Error()).WithCause(err)
	}
	return nil
}

// callInfo returns the client CallInfo of ctx, which connect's Client
// always gives a call; nil without one.
func callInfo(ctx context.Context) *connect.CallInfo {
	info, _ := connect.CallInfoForClientContext(ctx)
	return info
}

// attemptInfo returns ctx with a CallInfo of its own for an attempt that
// follows previous others, with a copy of the caller's request header and,
// after the first, the attempts header.
func attemptInfo(ctx context.Context, caller *connect.CallInfo, previous int) (context.Context, *connect.CallInfo) {
	ctx, info := connect.NewClientContext(ctx)
	if caller != nil {
		h := info.RequestHeader()
		for k, v := range caller.RequestHeader().All() {
			h.SetValues(k, slices.Clone(v))
		}
	}
	if previous > 0 {
		info.RequestHeader().Set(engine.PreviousAttemptsHeader, strconv.Itoa(previous))
	}
	return ctx, info
}

// copyInfo makes dst, the caller's CallInfo, describe the attempt of src
// that the call ended with: everything but the request header, which
// stays the caller's.
func copyInfo(dst, src *connect.CallInfo) {
	if dst == nil {
		return
	}
	copyOpened(dst, src)
	dst.ReceiveStats, dst.SendStats = src.ReceiveStats, src.SendStats
	replaceHeader(dst.ResponseHeader(), src.ResponseHeader())
	replaceHeader(dst.ResponseTrailer(), src.ResponseTrailer())
}

// copyOpened copies what a transport sets as it opens a stream.
func copyOpened(dst, src *connect.CallInfo) {
	dst.Spec, dst.PeerAddr, dst.Protocol, dst.Codec = src.Spec, src.PeerAddr, src.Protocol, src.Codec
	dst.RequestEncoding, dst.ResponseEncoding, dst.TransportInfo = src.RequestEncoding, src.ResponseEncoding, src.TransportInfo
}

// replaceHeader makes dst hold what src holds.
func replaceHeader(dst, src *connect.Header) {
	for k := range dst.All() {
		dst.Delete(k)
	}
	for k, v := range src.All() {
		dst.SetValues(k, v)
	}
}
