package a6

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Hints are a client's settings for google.rpc.RetryInfo in status
// details: Cap, the longest retry_delay waited out (0 means
// rebound.DefaultRetryDelayCap), and Required, the codes retried only
// when the server sent a RetryInfo.
type Hints struct {
	Cap      time.Duration
	Required serviceconfig.CodeSet
}

// RetryDelay returns the retry_delay of ri, the first RetryInfo of a
// status's details, and whether it is one to follow: a RetryInfo without
// a delay, with an invalid one (nanos out of range or of the other sign),
// or with a negative one is advice that cannot be read, so it is ignored.
func RetryDelay(ri *errdetails.RetryInfo) (time.Duration, bool) {
	d := ri.GetRetryDelay()
	if d == nil || d.CheckValid() != nil || d.GetSeconds() < 0 || d.GetNanos() < 0 {
		return 0, false
	}
	const maxSeconds = int64(1<<63-1) / int64(time.Second)
	if d.GetSeconds() >= maxSeconds {
		return 1<<63 - 1, true // beyond any cap
	}
	return d.AsDuration(), true
}

// Apply adds a server's RetryInfo to info, the classification of an
// attempt that failed with code under a retry or hedging policy. has says
// the status carried a valid RetryInfo, and delay is its retry_delay.
//
//   - A code in Required is retried only with a RetryInfo, whatever the
//     policy's codes say (OpenTelemetry's OTLP exporters' rule for
//     RESOURCE_EXHAUSTED).
//   - Pushback wins: when the trailer held grpc-retry-pushback-ms (a delay
//     or "stop"), RetryInfo is ignored.
//   - Otherwise the delay is a minimum wait (RetryInfo.MinDelay); one
//     beyond the cap stops retrying with [rebound.ErrRetryDelayTooLong].
func (h Hints) Apply(info rebound.RetryInfo, code serviceconfig.Code, delay time.Duration, has bool) rebound.RetryInfo {
	h.ApplyTo(&info, code, delay, has)
	return info
}

// ApplyTo is Apply in place, for a caller on a hot path: a RetryInfo is
// large, and each copy of one costs.
func (h Hints) ApplyTo(info *rebound.RetryInfo, code serviceconfig.Code, delay time.Duration, has bool) {
	if h.Required.Has(code) {
		info.Safety = rebound.SafetyNo
		if has {
			info.Safety = rebound.SafetyYes
		}
	}
	if !has || info.HasRetryAfter || info.ServerStop {
		return
	}
	limit := h.Cap
	if limit <= 0 {
		limit = rebound.DefaultRetryDelayCap
	}
	if delay > limit {
		info.Stop = rebound.ErrRetryDelayTooLong
		return
	}
	info.MinDelay = delay
}

// SetRetryDelayCap is WithRetryDelayCap: d must be > 0.
func (o *Options) SetRetryDelayCap(d time.Duration) {
	if d <= 0 {
		o.Fail("WithRetryDelayCap: d must be > 0, got %v", d)
		return
	}
	o.Hints.Cap = d
}

// SetRetryInfoRequired is WithRetryInfoRequired: each code must be a
// failure's, 1 to 16.
func (o *Options) SetRetryInfoRequired(codes []serviceconfig.Code) {
	var set serviceconfig.CodeSet
	for i, c := range codes {
		if c == serviceconfig.OK || !serviceconfig.NewCodeSet(c).Has(c) {
			o.Fail("WithRetryInfoRequired: codes[%d] must be a failure's status code, 1 to 16, got %d", i, c)
			return
		}
		set |= serviceconfig.NewCodeSet(c)
	}
	o.Hints.Required = set
}
