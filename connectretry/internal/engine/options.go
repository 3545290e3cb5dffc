package engine

import (
	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
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
	// BufferTotal and BufferPerCall bound the bytes of request messages
	// that streaming calls keep for replay (A6 "Memory Management"): all
	// of an Interceptor's calls together, and one call.
	BufferTotal, BufferPerCall int
}

// Metadata is a failed attempt's response metadata as its front door keeps
// it, for the classifier: nil for connect v1, whose errors carry it, and
// the attempt's *connect.CallInfo for connect v2.
type Metadata = any

// The default buffer limits, A6's: 16 MiB for a client, 1 MiB for a call.
const (
	DefaultBufferTotal   = 16 << 20
	DefaultBufferPerCall = 1 << 20
)

// NewOptions returns the defaults.
func NewOptions() Options {
	return Options{Options: a6.NewOptions("connectretry"), BufferTotal: DefaultBufferTotal, BufferPerCall: DefaultBufferPerCall}
}

// SetBufferLimits is WithBufferLimits, worded as grpcretry's: both must be
// > 0 and perRPC <= total.
func (o *Options) SetBufferLimits(total, perRPC int) {
	if total <= 0 || perRPC <= 0 || perRPC > total {
		o.Fail("WithBufferLimits: need 0 < perRPC <= total, got total %d, perRPC %d", total, perRPC)
		return
	}
	o.BufferTotal, o.BufferPerCall = total, perRPC
}
