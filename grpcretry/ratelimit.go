package grpcretry

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/ratelimit"
)

// WithAdaptiveRateLimit paces the calls to each server name (see
// [WithServerName]) to the rate the server accepts (see
// [rebound.AdaptiveRateLimit]): every attempt, the first included, of every call
// on the ClientConn waits for a send token within its context. When its
// turn would come after the context's deadline it fails at once, without
// reaching the server, with RESOURCE_EXHAUSTED and an error that unwraps
// to [rebound.ErrRateLimited]; it is not retried, so the call ends with
// [rebound.ErrThrottled]. A wait the caller cancels gives its token back.
//
// RESOURCE_EXHAUSTED, and any status with a grpc-retry-pushback-ms
// trailer, are throttles; the pushback delay, or else the retry_delay of a
// google.rpc.RetryInfo in the status details, holds the rate until it has
// passed. Every other status only feeds the measured rate. With
// [WithClassifier], the classifier's SlowDown mark has the last word on a
// call's failed attempts, streams included: the built-in verdict it is
// given marks what these rules count, a failure it marks counts as a
// throttle, and a throttle it unmarks only feeds the measured rate. The
// limit starts at the server's first throttle; until then only its slow
// start holds attempts back (at most four in flight until answers come
// back, then twice as many each round trip: a few round trips once,
// never more than a quarter-second; see [rebound.AdaptiveRateLimit]).
//
// Every client of the process with the same server name and c shares one
// limiter, so that they together keep to the server's limit. c's fields
// must be valid; the zero value means the AWS SDKs' constants.
func WithAdaptiveRateLimit(c rebound.AdaptiveRateLimitConfig) Option {
	return optionFunc(func(o *options) { o.SetRateLimit(c) })
}

// awaitVerdict gives an attempt's context a place where its answer waits
// for the classifier's verdict before the rate limit hears of it (see
// ratelimit.Verdict), when the client has both.
func (o *options) awaitVerdict(ctx context.Context) (context.Context, *ratelimit.Verdict) {
	return ratelimit.Await(ctx, o.RateLimit != nil && o.classify != nil)
}

// rateLimited is the error of an attempt whose turn would come after its
// deadline: RESOURCE_EXHAUSTED, unwrapping to rebound.ErrRateLimited.
type rateLimited struct{}

func (rateLimited) Error() string { return "grpcretry: " + rebound.ErrRateLimited.Error() }
func (rateLimited) Unwrap() error { return rebound.ErrRateLimited }
func (rateLimited) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, "grpcretry: "+rebound.ErrRateLimited.Error())
}
func (rateLimited) KeptHome() {}

// waitEnded is the error of an attempt whose context ended while it
// waited for its turn: the context's status.
type waitEnded struct{ st *status.Status }

func (w waitEnded) Error() string              { return w.st.Err().Error() }
func (w waitEnded) GRPCStatus() *status.Status { return w.st }
func (waitEnded) KeptHome()                    {}

// waitError turns the error of a wait into an attempt's error, which is
// a ratelimit.KeptHome: the attempt did not leave.
func waitError(ctx context.Context, err error) error {
	if err == rebound.ErrRateLimited {
		return rateLimited{}
	}
	return waitEnded{status.FromContextError(ctx.Err())}
}

// feedback returns what an attempt's status and trailer say about the
// server's limit. The server's wait is the pushback delay, else a
// google.rpc.RetryInfo's retry_delay.
func feedback(err error, trailer metadata.MD) rebound.RateFeedback {
	return a6.RateFeedback(uint32(status.Code(err)), trailer[a6.PushbackHeader], func() time.Duration {
		st, _ := status.FromError(err)
		d, _ := retryDelay(st)
		return d
	})
}

// limitedInvoker makes each attempt wait for its turn and tells g of each
// answer.
func limitedInvoker(g *ratelimit.Gate, invoker grpc.UnaryInvoker) grpc.UnaryInvoker {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		r, err := g.Wait(ctx)
		if err != nil {
			return waitError(ctx, err)
		}
		var trailer metadata.MD
		err = invoker(ctx, method, req, reply, cc, append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))...)
		g.Answer(ctx, r, err != nil, feedback(err, trailer))
		return err
	}
}

// limitedStreamer makes each stream attempt wait for its turn; the
// attempt's status and trailer, seen when its messages end, tell g what
// the server said.
func limitedStreamer(g *ratelimit.Gate, streamer grpc.Streamer) grpc.Streamer {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		r, err := g.Wait(ctx)
		if err != nil {
			return nil, waitError(ctx, err)
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			g.Observe(r, feedback(err, nil))
			return nil, err
		}
		return &limitedStream{ClientStream: cs, ctx: ctx, gate: g, r: r}, nil
	}
}

type limitedStream struct {
	grpc.ClientStream
	ctx  context.Context // the attempt's: it may hold a Verdict
	gate *ratelimit.Gate
	r    rebound.Reservation
	done atomic.Bool
}

func (s *limitedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && s.done.CompareAndSwap(false, true) {
		st := err
		if err == io.EOF {
			st = nil
		}
		s.gate.Answer(s.ctx, s.r, st != nil, feedback(st, s.ClientStream.Trailer()))
	}
	return err
}
