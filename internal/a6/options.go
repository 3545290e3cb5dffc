package a6

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/override"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Options are the client settings grpcretry and connectretry share, with
// the checks of the options that set them. Each package keeps its own
// exported option functions and their docs; they call these setters.
type Options struct {
	MaxAttempts   int // the client-side cap, default 5
	Disabled      bool
	ServerName    string
	Clock         rebound.Clock
	Random        rebound.Random
	MeterProvider metric.MeterProvider
	Logger        *slog.Logger
	// TracerProvider is nil unless WithTracerProvider was given.
	TracerProvider trace.TracerProvider
	// PerAttemptTimeout is WithPerAttemptTimeout's; 0 for none.
	PerAttemptTimeout time.Duration
	// TrustedOverrides lets a call's rebound.Override loosen its policy.
	TrustedOverrides bool
	// Budget is WithBudget's; nil for none.
	Budget rebound.Budget
	// Hints are WithRetryDelayCap's and WithRetryInfoRequired's.
	Hints Hints
	// AdaptiveThrottle is WithAdaptiveThrottle's config; nil when off.
	AdaptiveThrottle *rebound.AdaptiveThrottleConfig
	// RateLimit is WithAdaptiveRateLimit's settings; nil when off.
	RateLimit *rebound.AdaptiveRateLimitConfig
	// Err is the first invalid option, prefixed with the package name.
	Err error

	pkg string
}

// NewOptions returns the defaults for the package named pkg.
func NewOptions(pkg string) Options {
	return Options{MaxAttempts: serviceconfig.DefaultMaxAttemptsCap, pkg: pkg}
}

// Fail records the first invalid option.
func (o *Options) Fail(format string, args ...any) {
	if o.Err == nil {
		o.Err = fmt.Errorf(o.pkg+": "+format, args...)
	}
}

// SetMaxAttemptsCap is WithMaxAttemptsCap: n must be >= 1.
func (o *Options) SetMaxAttemptsCap(n int) {
	if n < 1 {
		o.Fail("WithMaxAttemptsCap: n must be >= 1, got %d", n)
		return
	}
	o.MaxAttempts = n
}

// SetServerName is WithServerName: name must not be empty.
func (o *Options) SetServerName(name string) {
	if name == "" {
		o.Fail("WithServerName: name must not be empty")
		return
	}
	o.ServerName = name
}

// SetClock is WithClock.
func (o *Options) SetClock(c rebound.Clock) {
	if c == nil {
		o.Fail("WithClock: nil clock")
		return
	}
	o.Clock = c
}

// SetRandom is WithRandom.
func (o *Options) SetRandom(r rebound.Random) {
	if r == nil {
		o.Fail("WithRandom: nil source")
		return
	}
	o.Random = r
}

// SetMeterProvider is WithMeterProvider.
func (o *Options) SetMeterProvider(mp metric.MeterProvider) {
	if mp == nil {
		o.Fail("WithMeterProvider: nil MeterProvider")
		return
	}
	o.MeterProvider = mp
}

// SetTracerProvider is WithTracerProvider.
func (o *Options) SetTracerProvider(tp trace.TracerProvider) {
	if tp == nil {
		o.Fail("WithTracerProvider: nil TracerProvider")
		return
	}
	o.TracerProvider = tp
}

// SetLogger is WithLogger.
func (o *Options) SetLogger(l *slog.Logger) {
	if l == nil {
		o.Fail("WithLogger: nil Logger")
		return
	}
	o.Logger = l
}

// Settings returns what Strategies needs of o.
func (o *Options) Settings() Settings {
	return Settings{MaxAttempts: o.MaxAttempts, Clock: o.Clock, Random: o.Random, Budget: o.Budget}
}

// SetPerAttemptTimeout is WithPerAttemptTimeout: d must be > 0.
func (o *Options) SetPerAttemptTimeout(d time.Duration) {
	if d <= 0 {
		o.Fail("WithPerAttemptTimeout: d must be > 0, got %v", d)
		return
	}
	o.PerAttemptTimeout = d
}

// Timeout returns the per-attempt timeout of calls under mc: the smaller of
// the retryPolicy's perAttemptRecvTimeout and WithPerAttemptTimeout, 0 for
// none. Hedged calls have none: their hedgingDelay sends the next attempt
// instead of cutting the first.
func (o *Options) Timeout(mc *serviceconfig.MethodConfig) time.Duration {
	if mc == nil || mc.RetryPolicy == nil {
		return 0
	}
	return minTimeout(configTimeout(mc.RetryPolicy), o.PerAttemptTimeout)
}

// minTimeout returns the smaller of two timeouts, where 0 means none.
func minTimeout(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// Override returns the method config of a call under mc that carries ov,
// with its per-attempt timeout, and the fields of ov that were clamped (see
// package override). The config is mc itself when ov changes nothing in it,
// else a copy; the caller must not cache anything by its address. ov must
// be valid.
func (o *Options) Override(mc *serviceconfig.MethodConfig, ov rebound.Override) (*serviceconfig.MethodConfig, time.Duration, []string) {
	p := override.Policy{MaxAttempts: 1, Timeout: o.Timeout(mc)}
	var codes serviceconfig.CodeSet
	if mc != nil {
		switch {
		case mc.RetryPolicy != nil:
			p.Present, p.MaxAttempts, codes = true, mc.RetryPolicy.Attempts(o.MaxAttempts), mc.RetryPolicy.RetryableStatusCodes
		case mc.HedgingPolicy != nil:
			p.Present, p.MaxAttempts, codes = true, mc.HedgingPolicy.Attempts(o.MaxAttempts), mc.HedgingPolicy.NonFatalStatusCodes
		}
	}
	has := func(c int) bool { return c >= 0 && codes.Has(serviceconfig.Code(c)) }
	r := override.Apply(p, has, ov, o.TrustedOverrides, o.MaxAttempts)
	if r.Policy == p && r.Codes == nil {
		return mc, r.Timeout, r.Clamped
	}
	out := serviceconfig.MethodConfig{}
	if mc != nil {
		out = *mc
	}
	if r.Codes != nil {
		codes = 0
		for _, c := range r.Codes {
			if c >= 0 && c <= int(^uint32(0)>>1) {
				codes |= serviceconfig.NewCodeSet(serviceconfig.Code(c))
			}
		}
	}
	switch {
	case r.Created:
		b := rebound.DefaultBackoff()
		out.RetryPolicy = &serviceconfig.RetryPolicy{MaxAttempts: r.MaxAttempts, InitialBackoff: b.Initial, MaxBackoff: b.Max,
			BackoffMultiplier: b.Multiplier, RetryableStatusCodes: codes}
	case out.RetryPolicy != nil:
		rp := *out.RetryPolicy
		rp.MaxAttempts, rp.RetryableStatusCodes = r.MaxAttempts, codes
		out.RetryPolicy = &rp
	case out.HedgingPolicy != nil:
		hp := *out.HedgingPolicy
		hp.MaxAttempts, hp.NonFatalStatusCodes = r.MaxAttempts, codes
		out.HedgingPolicy = &hp
	}
	return &out, r.Timeout, r.Clamped
}

// configTimeout returns the retryPolicy's perAttemptRecvTimeout; 0 for
// none.
func configTimeout(p *serviceconfig.RetryPolicy) time.Duration { return p.PerAttemptRecvTimeout }
