package suite

import (
	"log/slog"
	"time"

	connectv1 "connectrpc.com/connect"
	connectv2 "connectrpc.com/connect/v2"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound"
	retryv1 "github.com/rebound-go/rebound/connectretry"
	retryv2 "github.com/rebound-go/rebound/connectretry/v2"
)

// The options of both front doors, by the one name they share.

func withClock(c rebound.Clock) option {
	return option{retryv1.WithClock(c), retryv2.WithClock(c)}
}

func withRandom(r rebound.Random) option {
	return option{retryv1.WithRandom(r), retryv2.WithRandom(r)}
}

func withMaxAttemptsCap(n int) option {
	return option{retryv1.WithMaxAttemptsCap(n), retryv2.WithMaxAttemptsCap(n)}
}

func withRetriesDisabled() option {
	return option{retryv1.WithRetriesDisabled(), retryv2.WithRetriesDisabled()}
}

func withServerName(name string) option {
	return option{retryv1.WithServerName(name), retryv2.WithServerName(name)}
}

func withMeterProvider(mp metric.MeterProvider) option {
	return option{retryv1.WithMeterProvider(mp), retryv2.WithMeterProvider(mp)}
}

func withTracerProvider(tp trace.TracerProvider) option {
	return option{retryv1.WithTracerProvider(tp), retryv2.WithTracerProvider(tp)}
}

func withLogger(l *slog.Logger) option {
	return option{retryv1.WithLogger(l), retryv2.WithLogger(l)}
}

func withPerAttemptTimeout(d time.Duration) option {
	return option{retryv1.WithPerAttemptTimeout(d), retryv2.WithPerAttemptTimeout(d)}
}

func withTrustedOverrides() option {
	return option{retryv1.WithTrustedOverrides(), retryv2.WithTrustedOverrides()}
}

func withBudget(b rebound.Budget) option {
	return option{retryv1.WithBudget(b), retryv2.WithBudget(b)}
}

func withAdaptiveThrottle(c rebound.AdaptiveThrottleConfig) option {
	return option{retryv1.WithAdaptiveThrottle(c), retryv2.WithAdaptiveThrottle(c)}
}

func withAdaptiveRateLimit(c rebound.AdaptiveRateLimitConfig) option {
	return option{retryv1.WithAdaptiveRateLimit(c), retryv2.WithAdaptiveRateLimit(c)}
}

func withRetryDelayCap(d time.Duration) option {
	return option{retryv1.WithRetryDelayCap(d), retryv2.WithRetryDelayCap(d)}
}

func withBufferLimits(total, perCall int) option {
	return option{retryv1.WithBufferLimits(total, perCall), retryv2.WithBufferLimits(total, perCall)}
}

func withRetryInfoRequired(codes ...code) option {
	c1 := make([]connectv1.Code, len(codes))
	c2 := make([]connectv2.Code, len(codes))
	for i, c := range codes {
		c1[i], c2[i] = connectv1.Code(c), connectv2.Code(c)
	}
	return option{retryv1.WithRetryInfoRequired(c1...), retryv2.WithRetryInfoRequired(c2...)}
}

// failed is a failed attempt as a classifier sees it, in either major.
type failed struct {
	procedure string
	code      code
	message   string
	meta      func(key string) string // the response metadata the major shows the classifier
}

// withClassifier gives both front doors the classifier f.
func withClassifier(f func(failed, rebound.RetryInfo) rebound.RetryInfo) option {
	if f == nil {
		return option{retryv1.WithClassifier(nil), retryv2.WithClassifier(nil)}
	}
	return option{
		retryv1.WithClassifier(func(fl retryv1.Failure, info rebound.RetryInfo) rebound.RetryInfo {
			return f(failed{fl.Method, code(fl.Err.Code()), fl.Err.Message(), fl.Err.Meta().Get}, info)
		}),
		retryv2.WithClassifier(func(fl retryv2.Failure, info rebound.RetryInfo) rebound.RetryInfo {
			meta := func(k string) string {
				if v := fl.Trailer.Get(k); v != "" {
					return v
				}
				return fl.Header.Get(k)
			}
			return f(failed{fl.Method, code(fl.Err.Code()), fl.Err.Message(), meta}, info)
		}),
	}
}
