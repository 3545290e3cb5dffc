package connectretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/ratelimit"
)

// WithAdaptiveRateLimit paces the calls to each server name (see
// [WithServerName]; by default the peer's address) to the rate the server
// accepts (see [rebound.AdaptiveRateLimit]): every attempt, the first included,
// of every call waits for a send token within its context. When its turn
// would come after the context's deadline it fails at once, without
// reaching the server, with CodeResourceExhausted and an error that
// unwraps to [rebound.ErrRateLimited]; it is not retried, so the call ends
// with [rebound.ErrThrottled]. A wait the caller cancels gives its token
// back.
//
// ResourceExhausted, and any answer with a grpc-retry-pushback-ms
// trailer, are throttles; the pushback delay, or else the retry_delay of a
// google.rpc.RetryInfo in the error details, holds the rate until it has
// passed. Every other answer only feeds the measured rate. With
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

// waitError turns the error of a wait into an attempt's error, which
// wraps a ratelimit.KeptHome: the attempt did not leave.
func waitError(ctx context.Context, err error) *connect.Error {
	switch {
	case errors.Is(err, rebound.ErrRateLimited):
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("connectretry: %w", ratelimit.Kept(err)))
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, ratelimit.Kept(err))
	}
	return connect.NewError(connect.CodeCanceled, ratelimit.Kept(err))
}

// awaitVerdict gives an attempt's context a place where its answer waits
// for the classifier's verdict before the rate limit hears of it (see
// ratelimit.Verdict), when the interceptor has both.
func (o *options) awaitVerdict(ctx context.Context) (context.Context, *ratelimit.Verdict) {
	return ratelimit.Await(ctx, o.RateLimit != nil && o.classify != nil)
}

// rateFeedback returns what an attempt's error, or the trailer of its
// answer, says about the server's limit. Connect puts a failed call's
// trailers in its error's metadata.
func rateFeedback(err error, trailer http.Header) rebound.RateFeedback {
	var (
		code connect.Code
		ce   *connect.Error
	)
	if err != nil && !errors.Is(err, io.EOF) {
		code = connect.CodeOf(err)
		if errors.As(err, &ce) && ce.Meta().Get(pushbackKey) != "" {
			trailer = ce.Meta()
		}
	}
	return a6.RateFeedback(uint32(code), trailer[pushbackKey], func() time.Duration {
		d, _ := retryDelay(ce)
		return d
	})
}

// limitedUnary makes each attempt wait for its turn and tells g of each
// answer.
func limitedUnary(g *ratelimit.Gate, next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		r, err := g.Wait(ctx)
		if err != nil {
			return nil, waitError(ctx, err)
		}
		resp, err := next(ctx, req)
		var trailer http.Header
		if err == nil && resp != nil {
			trailer = resp.Trailer()
		}
		g.Answer(ctx, r, err != nil, rateFeedback(err, trailer))
		return resp, err
	}
}

// limitedStreaming makes each stream attempt wait for the turn of its
// server name; the end of its messages tells the limiter what the server
// said. A stream that does not get its turn never sends: connect makes
// the request on the first write.
func (i *Interceptor) limitedStreaming(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		g := i.target(conn.Peer().Addr).limit
		r, err := g.Wait(ctx)
		if err != nil {
			return newErrConn(spec, waitError(ctx, err))
		}
		return &limitedConn{StreamingClientConn: conn, ctx: ctx, gate: g, r: r}
	}
}

type limitedConn struct {
	connect.StreamingClientConn
	ctx  context.Context // the attempt's: it may hold a Verdict
	gate *ratelimit.Gate
	r    rebound.Reservation
	done atomic.Bool
}

func (c *limitedConn) Receive(m any) error {
	err := c.StreamingClientConn.Receive(m)
	if err != nil && c.done.CompareAndSwap(false, true) {
		c.gate.Answer(c.ctx, c.r, !errors.Is(err, io.EOF), rateFeedback(err, c.StreamingClientConn.ResponseTrailer()))
	}
	return err
}
