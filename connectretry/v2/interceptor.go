package connectretry

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect/v2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry/internal/engine"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Interceptor retries and hedges the calls of a connect client as a
// service config says (gRFC A6). Its method [Interceptor.WrapClient] is
// the connect.ClientInterceptor to install:
//
//	client := pingv1connect.NewPingServiceClient(connect.NewClient(transport,
//		connectretry.NewInterceptor(cfg).WrapClient))
//
// List it last among the client's interceptors, so that the others run
// once per call rather than once per attempt.
//
// An Interceptor keeps the throttle of each server name, a strategy per
// method config, the statistics of its calls ([Interceptor.Stats]) and the
// replay buffers of its streams; it is safe for concurrent use and may be
// shared by many clients. The zero value has no service config: it makes
// every call once.
type Interceptor struct {
	e   *engine.Interceptor // nil in the zero value and after an invalid option
	err error               // an invalid option, reported by every call
}

// zero is the engine of the zero Interceptor: no service config, every
// call made once.
var zero = engine.Zero(major{})

// engine returns i's engine.
func (i *Interceptor) engine() *engine.Interceptor {
	if i.e == nil {
		return zero
	}
	return i.e
}

// New returns an Interceptor for cfg, or an error naming the first invalid
// option. A nil cfg configures no policy: calls are made once.
func New(cfg *serviceconfig.Config, opts ...Option) (*Interceptor, error) {
	e, err := engine.New(cfg, buildOptions(opts), major{}, "github.com/rebound-go/rebound/connectretry/v2")
	if err != nil {
		return nil, err
	}
	return &Interceptor{e: e}, nil
}

// NewInterceptor returns the [Interceptor] for cfg, to install in one line
// (see [Interceptor]). An invalid option does not panic: [Interceptor.Err]
// reports it, and every call through the interceptor fails with
// connect.CodeInternal and the error, which names the option, without
// reaching the server. [New] returns the error instead.
func NewInterceptor(cfg *serviceconfig.Config, opts ...Option) *Interceptor {
	i, err := New(cfg, opts...)
	if err != nil {
		return &Interceptor{err: err}
	}
	return i
}

// Err returns the error of the first invalid option given to
// [NewInterceptor], or nil.
func (i *Interceptor) Err() error { return i.err }

// Stats returns a snapshot of the retry statistics (gRFC A6) of the calls
// that a retry or hedging policy governed, by procedure
// ("/pkg.Service/Method"): a unary call is counted when it returns, a
// stream when it commits to an attempt or fails before one. Calls made
// once because no policy applies are not counted. Stats is safe to call at
// any time, also while calls run; the result is the caller's. It is empty
// for the zero Interceptor and for one with an invalid option.
func (i *Interceptor) Stats() rebound.Stats { return i.engine().Stats() }

// WrapClient is the connect.ClientInterceptor: it wraps the opening of every
// call, unary or streaming, so that the call is retried or hedged per its
// method's policy. Install it with connect.NewClient(transport,
// i.WrapClient).
func (i *Interceptor) WrapClient(next connect.ClientFunc) connect.ClientFunc {
	return func(ctx context.Context, spec connect.Spec) (connect.ClientStream, error) {
		if i.err != nil {
			return nil, connect.NewError(connect.CodeInternal, i.err.Error()).WithCause(i.err)
		}
		if spec.StreamType == connect.StreamTypeUnary {
			return i.unary(ctx, next, spec)
		}
		return i.stream(ctx, next, spec)
	}
}

// major is connect v2 as the engine sees it.
type major struct{}

// Code returns err's code. connect v2 may report a call's cancellation as
// a bare context error; it is then Canceled or DeadlineExceeded.
func (major) Code(err error) serviceconfig.Code {
	if ce, ok := errors.AsType[*connect.Error](err); ok && ce != nil {
		return serviceconfig.Code(ce.Code())
	}
	switch {
	case errors.Is(err, context.Canceled):
		return serviceconfig.Cancelled
	case errors.Is(err, context.DeadlineExceeded):
		return serviceconfig.DeadlineExceeded
	}
	return serviceconfig.Unknown
}

func (major) RetryDelay(err error) (time.Duration, bool) {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return 0, false
	}
	return retryDelay(ce)
}

func (major) Error(code serviceconfig.Code, err error) error {
	return connect.NewError(connect.Code(code), err.Error()).WithCause(err)
}

func (major) GaveUp(re *rebound.Error) error { return newCallError(re) }

// retryDelay returns the delay of the first google.rpc.RetryInfo in ce's
// details, and whether there is a valid one.
func retryDelay(ce *connect.Error) (time.Duration, bool) {
	for _, d := range ce.Details() {
		if d.Type != "google.rpc.RetryInfo" {
			continue
		}
		var ri errdetails.RetryInfo
		if err := proto.Unmarshal(d.Value, &ri); err != nil {
			return 0, false
		}
		return a6.RetryDelay(&ri)
	}
	return 0, false
}
