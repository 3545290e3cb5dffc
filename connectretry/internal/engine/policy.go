package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/override"
	"github.com/rebound-go/rebound/serviceconfig"
)

// The context keys of the values a caller puts on a call's context. The
// two front doors share them: a call's settings are the same whichever
// major makes it.
type (
	attemptsKey struct{}
	overrideKey struct{}
)

// CountAttempts returns ctx carrying n, for the call to store its number
// of attempts in.
func CountAttempts(ctx context.Context, n *int) context.Context {
	return context.WithValue(ctx, attemptsKey{}, n)
}

// attemptsOut returns the *int of CountAttempts, or nil.
func attemptsOut(ctx context.Context) *int {
	n, _ := ctx.Value(attemptsKey{}).(*int)
	return n
}

// WithOverride returns ctx carrying o, for the calls made with it.
func WithOverride(ctx context.Context, o rebound.Override) context.Context {
	return context.WithValue(ctx, overrideKey{}, &o)
}

// Policy is the policy of one call: its method config, and the
// per-attempt timeout, once the call's Override applied.
type Policy struct {
	mc      *serviceconfig.MethodConfig
	timeout time.Duration
	fresh   bool     // mc is the call's own: its strategy must not be kept
	clamped []string // the override's fields held to the config
}

// retried reports whether the call has a retry or hedging policy.
func (p *Policy) retried(disabled bool) bool {
	return !disabled && p.mc != nil && (p.mc.RetryPolicy != nil || p.mc.HedgingPolicy != nil)
}

// resolve returns the policy of a call of procedure made with ctx.
func (i *Interceptor) resolve(ctx context.Context, procedure string) (Policy, error) {
	mc := i.cfg.MethodConfig(procedure)
	ov, _ := ctx.Value(overrideKey{}).(*rebound.Override)
	if ov == nil {
		return Policy{mc: mc, timeout: i.opts.Timeout(mc)}, nil
	}
	if err := override.Validate(*ov); err != nil {
		return Policy{}, i.major.Error(serviceconfig.InvalidArgument, fmt.Errorf("connectretry: %w", err))
	}
	omc, timeout, clamped := i.opts.Override(mc, *ov)
	return Policy{mc: omc, timeout: timeout, fresh: omc != mc, clamped: clamped}, nil
}

// logClamped logs an override held to the config.
func (i *Interceptor) logClamped(ctx context.Context, procedure, target string, clamped []string) {
	i.rec.Log(ctx, "rebound: override clamped to the service config", procedure, target,
		slog.Any("fields", clamped), slog.Bool("trusted", i.opts.TrustedOverrides))
}
