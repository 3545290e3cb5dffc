package a6

import (
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound"
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
	// Err is the first invalid option, prefixed with the package name.
	Err error

	pkg string
}

// NewOptions returns the defaults for the package named pkg.
func NewOptions(pkg string) Options {
	return Options{MaxAttempts: serviceconfig.DefaultMaxAttempts, pkg: pkg}
}

// Fail records the first invalid option.
func (o *Options) Fail(format string, args ...any) {
	if o.Err == nil {
		o.Err = fmt.Errorf(o.pkg+": "+format, args...)
	}
}

// SetMaxAttempts is WithMaxAttempts: n must be >= 1.
func (o *Options) SetMaxAttempts(n int) {
	if n < 1 {
		o.Fail("WithMaxAttempts: n must be >= 1, got %d", n)
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
	return Settings{MaxAttempts: o.MaxAttempts, Clock: o.Clock, Random: o.Random}
}
