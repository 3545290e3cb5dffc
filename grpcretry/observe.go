package grpcretry

import (
	"context"
	"time"

	"google.golang.org/grpc/stats"

	"github.com/rebound-go/rebound/internal/observe"
)

type trackerKey struct{}

// callStats is the stats handler that [Client.DialOptions] installs when it
// is needed, since a stats handler makes grpc-go build events for every
// call. It sees two things the interceptors cannot:
//
//   - the response headers of a hedged unary attempt as they arrive, which
//     commit the call to that attempt (A6 "When Retries are Valid"): grpc-go
//     tells an interceptor of them only once the attempt has ended. The
//     attempt takes its header and trailer from here too (see
//     headerContext);
//   - the response headers of a hedged stream's first attempt while no
//     goroutine waits for them, so that the hedging delay sends no hedge
//     after them (without the handler a goroutine waits for them);
//   - grpc-go's transparent retries, counted into the tracker of the call
//     they belong to, with WithMeterProvider.
type callStats struct{}

func (callStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	if s := hedgedStream(ctx); s != nil {
		s.tagged.Store(true)
	}
	return ctx
}

func (callStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.Begin:
		if s.IsTransparentRetryAttempt {
			if tr, ok := ctx.Value(trackerKey{}).(*observe.Tracker); ok {
				tr.Transparent()
			}
			attemptSpan(ctx).Transparent()
		}
	case *stats.InHeader:
		// Only a hedged attempt listens: a unary one's headers commit
		// the call; a stream's are noted for its hedging delay.
		if c, ok := ctx.Value(headerKey{}).(*headerContext); ok {
			c.received(&s.Header)
		} else if s := hedgedStream(ctx); s != nil {
			s.sawHeaders.Store(true) // see startHedged
		}
	case *stats.InTrailer:
		if c, ok := ctx.Value(headerKey{}).(*headerContext); ok {
			c.receivedTrailer(&s.Trailer)
		}
	}
}

func (callStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (callStats) HandleConn(context.Context, stats.ConnStats) {}

// callTracker returns the tracker of a call: with metrics on, made now and
// put in ctx for callStats; otherwise nil, to be made at the first
// failure, so that a call that succeeds at once allocates nothing for it.
func (c *Client) callTracker(ctx context.Context) (context.Context, *observe.Tracker) {
	if c.opts.MeterProvider == nil {
		return ctx, nil
	}
	tr := new(observe.Tracker)
	return context.WithValue(ctx, trackerKey{}, tr), tr
}

// now reads the client's clock for the retry-delay statistic, which is a
// difference of two readings. The real clock is read through its
// monotonic part alone, which takes half the time of time.Now, itself a
// seventh of a retry's cost: the wall clock plays no part in a difference.
func (c *Client) now() time.Time {
	if c.epoch.IsZero() {
		return c.clock.Now()
	}
	return c.epoch.Add(time.Since(c.epoch))
}
