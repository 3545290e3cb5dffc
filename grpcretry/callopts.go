package grpcretry

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/previous"
)

// countAttempts is the call option of [CountAttempts].
type countAttempts struct {
	grpc.EmptyCallOption
	n *int
}

// CountAttempts returns a call option that stores in *n how many attempts
// the call made, hedges included, once it returns (1 when it was not
// retried). For a stream, *n is set when the stream ends: it is valid once
// RecvMsg has returned an error (io.EOF included) or the response of a
// call that is not server-streaming (CloseAndRecv has returned), or once
// opening the stream failed.
func CountAttempts(n *int) grpc.CallOption { return countAttempts{n: n} }

// overrideOption is the call option of [Override].
type overrideOption struct {
	grpc.EmptyCallOption
	o *rebound.Override
}

// Override returns a call option that narrows the call's retry or hedging
// policy as o says: fewer attempts, a shorter per-attempt timeout, fewer
// retryable (or non-fatal) codes, given as the numbers of codes.Code, or
// no retry at all. Asking for more than the service config allows takes
// [WithTrustedOverrides]; see [rebound.Override]. An invalid o (a negative
// field) fails the call with codes.InvalidArgument before any attempt.
// The option is taken out of the call's options before grpc-go sees them;
// when several are given, the last one counts.
func Override(o rebound.Override) grpc.CallOption { return overrideOption{o: &o} }

// callOptions returns the caller's CountAttempts target and Override, and
// opts without the Override options. Without any, opts is returned as is.
func callOptions(opts []grpc.CallOption) (*int, *rebound.Override, []grpc.CallOption) {
	var (
		n  *int
		ov *rebound.Override
	)
	for _, o := range opts {
		switch o := o.(type) {
		case countAttempts:
			if n == nil && o.n != nil {
				n = o.n
			}
		case overrideOption:
			ov = o.o
		}
	}
	if ov == nil {
		return n, nil, opts
	}
	kept := make([]grpc.CallOption, 0, len(opts)-1)
	for _, o := range opts {
		if _, ok := o.(overrideOption); !ok {
			kept = append(kept, o)
		}
	}
	return n, ov, kept
}

// PreviousAttempts returns, in a server handler, the number of attempts of
// this call that came before this one, from the grpc-previous-rpc-attempts
// header: 0 on the first attempt or when the header is missing or invalid.
func PreviousAttempts(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	return previous.Parse(md[a6.PreviousAttemptsHeader])
}
