package connectretry

import (
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry/internal/engine"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Interceptor is a [connect.Interceptor] that retries and hedges client calls
// as a service config says (gRFC A6). Install it on a client with
// connect.WithInterceptors; put it last among the client's interceptors so
// that the others run once per call rather than once per attempt. On a
// handler it does nothing.
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

var _ connect.Interceptor = (*Interceptor)(nil)

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
	e, err := engine.New(cfg, buildOptions(opts), major{}, "github.com/rebound-go/rebound/connectretry")
	if err != nil {
		return nil, err
	}
	return &Interceptor{e: e}, nil
}

// Stats returns a snapshot of the retry statistics (gRFC A6) of the calls
// that a retry or hedging policy governed, by procedure
// ("/pkg.Service/Method"): a unary call is counted when it returns, a
// stream when it commits to an attempt or fails before one. Calls made
// once because no policy applies are not counted. Stats is safe to call at
// any time, also while calls run; the result is the caller's. It is empty
// for the zero Interceptor and for one with an invalid option.
func (i *Interceptor) Stats() rebound.Stats { return i.engine().Stats() }

// NewInterceptor returns the [Interceptor] for cfg, to install in one line:
//
//	client := pingv1connect.NewPingServiceClient(httpClient, url,
//		connect.WithInterceptors(connectretry.NewInterceptor(cfg)))
//
// An invalid option does not panic: [Interceptor.Err] reports it, and every
// client call through the interceptor fails with connect.CodeInternal and
// the error, which names the option, without reaching the server. [New]
// returns the error instead.
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

// WrapStreamingHandler returns next: retries are a client matter.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// major is connect v1 as the engine sees it.
type major struct{}

func (major) Code(err error) serviceconfig.Code { return serviceconfig.Code(connect.CodeOf(err)) }

func (major) RetryDelay(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0, false
	}
	return retryDelay(ce)
}

func (major) Error(code serviceconfig.Code, err error) error {
	return connect.NewError(connect.Code(code), err)
}

func (major) GaveUp(re *rebound.Error) error { return newCallError(re) }

// retryDelay returns the delay of the first google.rpc.RetryInfo in ce's
// details, and whether there is a valid one.
func retryDelay(ce *connect.Error) (time.Duration, bool) {
	for _, d := range ce.Details() {
		if d.Type() != "google.rpc.RetryInfo" {
			continue
		}
		v, err := d.Value()
		if ri, ok := v.(*errdetails.RetryInfo); ok && err == nil {
			return a6.RetryDelay(ri)
		}
		return 0, false
	}
	return 0, false
}
