package connectretry

import (
	"time"

	"connectrpc.com/connect/v2"

	"github.com/rebound-go/rebound/connectretry/internal/engine"
	"github.com/rebound-go/rebound/serviceconfig"
)

// WithRetryDelayCap sets the longest retry_delay of a google.rpc.RetryInfo
// in a failed attempt's error details that a call waits out.
//
// A server that sends RetryInfo asks the client to wait at least
// retry_delay before it tries again; Google's client libraries and
// OpenTelemetry's exporters follow it. So does a call under a retry or
// hedging policy: its next attempt waits max(backoff, retry_delay), and
// the next hedge waits retry_delay. A delay beyond the cap ends the call
// with [rebound.ErrRetryDelayTooLong], one beyond the call's deadline
// with [rebound.ErrDeadline]: a client that would not wait that long
// should not send the server another attempt to refuse. A
// grpc-retry-pushback-ms trailer, delay or "stop", wins over RetryInfo; a
// RetryInfo without a valid, non-negative delay is ignored. d must be >
// 0; the default is [rebound.DefaultRetryDelayCap].
func WithRetryDelayCap(d time.Duration) Option {
	return optionFunc(func(o *engine.Options) { o.SetRetryDelayCap(d) })
}

// WithRetryInfoRequired makes the listed codes retryable (or non-fatal,
// under a hedging policy) only when the failed attempt's error details
// carry a google.rpc.RetryInfo, whether or not the policy lists them: the
// rule of OpenTelemetry's OTLP exporters for CodeResourceExhausted, which
// is retried only when the server says when capacity will be back. It
// applies to calls under a retry or hedging policy. Each code must be one
// of connect's, 1 to 16.
func WithRetryInfoRequired(codes ...connect.Code) Option {
	return optionFunc(func(o *engine.Options) {
		sc := make([]serviceconfig.Code, len(codes))
		for i, c := range codes {
			sc[i] = serviceconfig.Code(c)
		}
		o.SetRetryInfoRequired(sc)
	})
}
