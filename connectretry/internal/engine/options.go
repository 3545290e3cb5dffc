package engine

import (
	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/replay"
)

// Options are an Interceptor's settings: those it shares with grpcretry,
// and the classifier. Each front door keeps its own exported option
// functions and their docs; they set these.
type Options struct {
	a6.Options
	// Classify is WithClassifier's, adapted by the front door to its
	// major's Failure: it gets the call's procedure, the attempt's error
	// and response metadata, and the built-in verdict. nil for none.
	Classify func(procedure string, err error, meta Metadata, info rebound.RetryInfo) rebound.RetryInfo
	// Buffers bound the bytes of request messages that streaming calls
	// keep for replay (A6 "Memory Management"): all of an Interceptor's
	// calls together, and one call.
	Buffers replay.Limits
}

// Metadata is a failed attempt's response metadata as its front door keeps
// it, for the classifier: nil for connect v1, whose errors carry it, and
// the attempt's *connect.CallInfo for connect v2.
type Metadata = any

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{Options: a6.NewOptions("connectretry"), Buffers: replay.Limits{Total: rebound.DefaultBufferTotal, PerCall: rebound.DefaultBufferPerCall}}
}

// SetBufferLimits is WithBufferLimits, worded as grpcretry's and
// httpretry's: both must be > 0 and perCall <= total.
func (o *Options) SetBufferLimits(total, perCall int) {
	if err := replay.Check(total, perCall); err != nil {
		o.Fail("WithBufferLimits: %v", err)
		return
	}
	o.Buffers = replay.Limits{Total: total, PerCall: perCall}
}
