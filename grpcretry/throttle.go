package grpcretry

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/ratelimit"
)

// WithAdaptiveThrottle turns on client-side adaptive throttling (see
// [rebound.AdaptiveThrottle]) with c: every attempt, the first included,
// of every call on the ClientConn asks the throttle of the server name
// (see [WithServerName]) whether to go out. One it keeps home fails at
// once, without reaching the server, with UNAVAILABLE and an error that
// unwraps to [rebound.ErrRejectedLocally]; it is not retried, so the call
// ends with [rebound.ErrThrottled]. Every status but UNAVAILABLE,
// RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED counts as accepted. An attempt
// that [WithAdaptiveRateLimit] keeps home counts neither way: it never
// reached the server. Every client of the process with the same server
// name and c shares one throttle. c's fields must be valid; the zero value
// means the SRE book's defaults.
func WithAdaptiveThrottle(c rebound.AdaptiveThrottleConfig) Option {
	return optionFunc(func(o *options) { o.SetAdaptiveThrottle(c) })
}

// rejectedLocally is the error of an attempt the adaptive throttle kept
// home: UNAVAILABLE, unwrapping to rebound.ErrRejectedLocally.
type rejectedLocally struct{}

func (rejectedLocally) Error() string {
	return "grpcretry: " + rebound.ErrRejectedLocally.Error()
}
func (rejectedLocally) Unwrap() error { return rebound.ErrRejectedLocally }
func (rejectedLocally) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, "grpcretry: "+rebound.ErrRejectedLocally.Error())
}

// gatedInvoker asks g before each attempt and tells it of each answer.
// An attempt the rate limit behind it kept home is taken back.
func gatedInvoker(g *adaptive.Gate, invoker grpc.UnaryInvoker) grpc.UnaryInvoker {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		at, ok := g.Allow()
		if !ok {
			return rejectedLocally{}
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		answered(g, at, err)
		return err
	}
}

// answered tells g what became of the attempt it let go at at, which
// ended with err.
func answered(g *adaptive.Gate, at time.Time, err error) {
	switch {
	case ratelimit.IsKeptHome(err):
		g.Withdraw(at)
	case adaptive.AcceptedCode(uint32(status.Code(err))):
		g.Accepted()
	}
}

// gatedStreamer asks g before each stream attempt; the attempt's status,
// seen when its messages end, tells g whether it was accepted.
func gatedStreamer(g *adaptive.Gate, streamer grpc.Streamer) grpc.Streamer {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		at, ok := g.Allow()
		if !ok {
			return nil, rejectedLocally{}
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			answered(g, at, err)
			return nil, err
		}
		return &gatedStream{ClientStream: cs, gate: g}, nil
	}
}

type gatedStream struct {
	grpc.ClientStream
	gate *adaptive.Gate
	done atomic.Bool
}

func (s *gatedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && s.done.CompareAndSwap(false, true) && (err == io.EOF || adaptive.AcceptedCode(uint32(status.Code(err)))) {
		s.gate.Accepted()
	}
	return err
}
