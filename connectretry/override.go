package connectretry

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/override"
	"github.com/rebound-go/rebound/internal/perattempt"
	"github.com/rebound-go/rebound/serviceconfig"
)

type overrideKey struct{}

// Override returns a copy of ctx that narrows the retry or hedging policy
// of the calls made with it through an [Interceptor], as o says: fewer
// attempts, a shorter per-attempt timeout, fewer retryable (or non-fatal)
// codes, given as the numbers of connect.Code, or no retry at all. Asking
// for more than the service config allows takes [WithTrustedOverrides];
// see [rebound.Override]. A call whose o is invalid (a negative field)
// fails with connect.CodeInvalidArgument before any attempt. It is
// grpcretry's Override call option, in connect-go's idiom: a call's
// settings travel on its context.
func Override(ctx context.Context, o rebound.Override) context.Context {
	return context.WithValue(ctx, overrideKey{}, &o)
}

// callPolicy is the policy of one call: its method config, and the
// per-attempt timeout, once the call's Override applied.
type callPolicy struct {
	mc      *serviceconfig.MethodConfig
	timeout time.Duration
	fresh   bool     // mc is the call's own: its strategy must not be kept
	clamped []string // the override's fields held to the config
}

// resolve returns the policy of a call of procedure made with ctx.
func (i *Interceptor) resolve(ctx context.Context, procedure string) (callPolicy, error) {
	mc := i.cfg.MethodConfig(procedure)
	ov, _ := ctx.Value(overrideKey{}).(*rebound.Override)
	if ov == nil {
		return callPolicy{mc: mc, timeout: i.opts.Timeout(mc)}, nil
	}
	if err := override.Validate(*ov); err != nil {
		return callPolicy{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("connectretry: %w", err))
	}
	omc, timeout, clamped := i.opts.Override(mc, *ov)
	return callPolicy{mc: omc, timeout: timeout, fresh: omc != mc, clamped: clamped}, nil
}

// logClamped logs an override held to the config.
func (i *Interceptor) logClamped(ctx context.Context, procedure, target string, clamped []string) {
	i.rec.Log(ctx, "rebound: override clamped to the service config", procedure, target,
		slog.Any("fields", clamped), slog.Bool("trusted", i.opts.TrustedOverrides))
}

// policyFor returns the strategy of a call's policy on t.
func (i *Interceptor) policyFor(t *target, cp callPolicy) *policyEntry {
	if cp.fresh {
		return i.newPolicy(t, cp.mc)
	}
	return i.policy(t, cp.mc)
}

// timeoutError is the error of an attempt cut by its per-attempt timeout:
// CodeDeadlineExceeded, with a message naming the timeout; errors.Is finds
// rebound.ErrAttemptTimeout through it. It is retried whatever the codes.
func timeoutError(d time.Duration) *a6.Failure {
	err := connect.NewError(connect.CodeDeadlineExceeded, perattempt.NewError("connectretry", d))
	return &a6.Failure{Err: err, Info: perattempt.Info(false)}
}
