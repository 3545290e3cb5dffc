package grpcretry

import (
	"context"
	"time"

	"google.golang.org/grpc/stats"

	"github.com/rebound-go/rebound/internal/observe"
)

type trackerKey struct{}

// transparentCounter is the stats handler that counts grpc-go's transparent
// retries into the tracker of the call they belong to; installed only with
// WithMeterProvider, since a stats handler makes grpc-go build events for
// every call.
type transparentCounter struct{}

func (transparentCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

func (transparentCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if b, ok := s.(*stats.Begin); ok && b.IsTransparentRetryAttempt {
		if tr, ok := ctx.Value(trackerKey{}).(*observe.Tracker); ok {
			tr.Transparent()
		}
	}
}

func (transparentCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (transparentCounter) HandleConn(context.Context, stats.ConnStats) {}

// callTracker returns the tracker of a call: with metrics on, made now and
// put in ctx for transparentCounter; otherwise nil, to be made at the first
// failure, so that a call that succeeds at once allocates nothing for it.
func (c *Client) callTracker(ctx context.Context) (context.Context, *observe.Tracker) {
	if c.opts.MeterProvider == nil {
		return ctx, nil
	}
	tr := new(observe.Tracker)
	return context.WithValue(ctx, trackerKey{}, tr), tr
}

// now reads the client's clock.
func (c *Client) now() time.Time { return c.clock.Now() }
