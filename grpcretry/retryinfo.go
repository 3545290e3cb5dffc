package grpcretry

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/serviceconfig"
)

// WithRetryDelayCap sets the longest retry_delay of a google.rpc.RetryInfo
// in a failed attempt's status details that a call waits out.
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
	return optionFunc(func(o *options) { o.SetRetryDelayCap(d) })
}

// WithRetryInfoRequired makes the listed codes retryable (or non-fatal,
// under a hedging policy) only when the failed attempt's status details
// carry a google.rpc.RetryInfo, whether or not the policy lists them: the
// rule of OpenTelemetry's OTLP exporters for RESOURCE_EXHAUSTED, which is
// retried only when the server says when capacity will be back. It applies
// to calls under a retry or hedging policy. Each code must be a failure's
// (not OK, at most Unauthenticated).
func WithRetryInfoRequired(codes ...codes.Code) Option {
	return optionFunc(func(o *options) {
		sc := make([]serviceconfig.Code, len(codes))
		for i, c := range codes {
			sc[i] = serviceconfig.Code(c)
		}
		o.SetRetryInfoRequired(sc)
	})
}

// hinted adds the google.rpc.RetryInfo of err's status to *info (see
// a6.Hints.Apply).
func hinted(h a6.Hints, info *rebound.RetryInfo, err error) {
	st, _ := status.FromError(err)
	d, has := retryDelay(st)
	h.ApplyTo(info, serviceconfig.Code(st.Code()), d, has)
}

// retryDelay returns the delay of the first google.rpc.RetryInfo in st's
// details, and whether there is a valid one.
func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return a6.RetryDelay(ri)
		}
	}
	return 0, false
}
