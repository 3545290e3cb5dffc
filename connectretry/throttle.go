package connectretry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/ratelimit"
)

// WithAdaptiveThrottle turns on client-side adaptive throttling (see
// [rebound.AdaptiveThrottle]) with c: every attempt, the first included,
// of every call asks the throttle of the server name (see
// [WithServerName]; by default the peer's address) whether to go out. One
// it keeps home fails at once, without reaching the server, with
// CodeUnavailable and an error that unwraps to
// [rebound.ErrRejectedLocally]; it is not retried, so the call ends with
// [rebound.ErrThrottled]. Every code but Unavailable, ResourceExhausted
// and DeadlineExceeded counts as accepted. An attempt that
// [WithAdaptiveRateLimit] keeps home counts neither way: it never reached
// the server. Every client of the process with the same server name and c
// shares one throttle. c's fields must be valid; the zero value means the
// SRE book's defaults.
func WithAdaptiveThrottle(c rebound.AdaptiveThrottleConfig) Option {
	return optionFunc(func(o *options) { o.SetAdaptiveThrottle(c) })
}

func rejectedLocally() *connect.Error {
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("connectretry: %w", rebound.ErrRejectedLocally))
}

// acceptedErr reports whether a call that ended with err was accepted.
func acceptedErr(err error) bool {
	if err == nil || errors.Is(err, io.EOF) {
		return true
	}
	return adaptive.AcceptedCode(uint32(connect.CodeOf(err)))
}

// gatedUnary asks g before each attempt and tells it of each answer. An
// attempt the rate limit behind it kept home is taken back.
func gatedUnary(g *adaptive.Gate, next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		at, ok := g.Allow()
		if !ok {
			return nil, rejectedLocally()
		}
		resp, err := next(ctx, req)
		switch {
		case ratelimit.IsKeptHome(err):
			g.Withdraw(at)
		case acceptedErr(err):
			g.Accepted()
		}
		return resp, err
	}
}

// gatedStreaming asks the gate of the stream's server name before each
// stream attempt; the end of its messages tells the gate whether it was
// accepted. A stream kept home never sends: connect makes the request on
// the first write. The conn comes first, for its peer's address, and with
// it the rate limit's word (see limitedStreaming): a stream the rate
// limit kept home is not the throttle's to count, and one it let go that
// the throttle keeps home gives its turn back.
func (i *Interceptor) gatedStreaming(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if ec, ok := conn.(*errConn); ok && ratelimit.IsKeptHome(ec.err) {
			return conn
		}
		g := i.target(conn.Peer().Addr).gate
		if _, ok := g.Allow(); !ok {
			if lc, ok := conn.(*limitedConn); ok {
				lc.gate.Cancel(lc.r)
			}
			return newErrConn(spec, rejectedLocally())
		}
		return &gatedConn{StreamingClientConn: conn, gate: g}
	}
}

type gatedConn struct {
	connect.StreamingClientConn
	gate *adaptive.Gate
	done atomic.Bool
}

func (c *gatedConn) Receive(m any) error {
	err := c.StreamingClientConn.Receive(m)
	if err != nil && c.done.CompareAndSwap(false, true) && acceptedErr(err) {
		c.gate.Accepted()
	}
	return err
}
