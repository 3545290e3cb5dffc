package grpcretry

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/override"
	"github.com/rebound-go/rebound/internal/perattempt"
	"github.com/rebound-go/rebound/serviceconfig"
)

// callPolicy is the policy of one call: its method config, and the
// per-attempt timeout, once the call's Override applied.
type callPolicy struct {
	mc      *serviceconfig.MethodConfig
	timeout time.Duration
	fresh   bool         // mc is the call's own: its strategy must not be kept
	m       *methodEntry // the method's, before the override
}

// resolve returns the target of cc and the policy of a call of method on
// it that carries ov (nil for none). A clamped override is logged.
func (c *Client) resolve(ctx context.Context, method string, cc *grpc.ClientConn, ov *rebound.Override) (*target, callPolicy, error) {
	t := c.target(cc)
	if t.src != nil && !t.settled.Load() {
		// The conn's resolver may not have spoken yet.
		c.await(ctx, cc)
		t = c.target(cc)
	}
	if t.src != nil {
		t.src.raise()
	}
	m := c.method(t, method)
	if ov == nil {
		if m.policy != nil && m.native.Load() != nativeNone {
			if err := c.nativeConflict(ctx, m, cc); err != nil {
				return t, callPolicy{}, err
			}
		}
		return t, callPolicy{mc: m.mc, timeout: m.timeout, m: m}, nil
	}
	if err := override.Validate(*ov); err != nil {
		return t, callPolicy{}, status.Error(codes.InvalidArgument, "grpcretry: "+err.Error())
	}
	omc, timeout, clamped := c.opts.Override(m.mc, *ov)
	if len(clamped) > 0 {
		c.rec.Log(ctx, "rebound: override clamped to the service config", method, t.uri,
			slog.Any("fields", clamped), slog.Bool("trusted", c.opts.TrustedOverrides))
	}
	if !c.opts.Disabled && omc != nil && (omc.RetryPolicy != nil || omc.HedgingPolicy != nil) {
		if err := c.nativeConflict(ctx, m, cc); err != nil {
			return t, callPolicy{}, err
		}
	}
	return t, callPolicy{mc: omc, timeout: timeout, fresh: omc != m.mc, m: m}, nil
}

// policyFor returns the strategy of a call's policy on t.
func (c *Client) policyFor(t *target, cp callPolicy) *policyEntry {
	switch {
	case cp.fresh:
		return c.newPolicy(t, cp.mc)
	case cp.m != nil && cp.m.policy != nil:
		return cp.m.policy
	}
	return c.policy(t, cp.mc)
}

// timeoutError is the status of an attempt cut by its per-attempt timeout:
// DEADLINE_EXCEEDED, with a message naming the timeout. errors.Is finds
// rebound.ErrAttemptTimeout through it.
type timeoutError struct {
	err *perattempt.Error
}

func newTimeoutError(d time.Duration) error {
	return &timeoutError{perattempt.NewError("grpcretry", d)}
}

// Error returns the text grpc-go gives a status error.
func (e *timeoutError) Error() string { return e.GRPCStatus().Err().Error() }

// GRPCStatus returns DEADLINE_EXCEEDED with the timeout's message.
func (e *timeoutError) GRPCStatus() *status.Status {
	return status.New(codes.DeadlineExceeded, e.err.Msg)
}

// Unwrap returns the attempt error, which unwraps to
// rebound.ErrAttemptTimeout.
func (e *timeoutError) Unwrap() error { return e.err }
