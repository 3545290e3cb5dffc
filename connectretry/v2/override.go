package connectretry

import (
	"context"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry/internal/engine"
)

// Override returns a copy of ctx that narrows the retry or hedging policy
// of the calls made with it through an [Interceptor], as o says: fewer
// attempts, a shorter per-attempt timeout, fewer retryable (or non-fatal)
// codes, given as the numbers of connect.Code, or no retry at all. Asking
// for more than the service config allows takes [WithTrustedOverrides];
// see [rebound.Override]. A call whose o is invalid (a negative field)
// fails with connect.CodeInvalidArgument before any attempt. It is
// grpcretry's Override call option, in connect-go's idiom: a call's
// settings travel on its context.
func Override(ctx context.Context, o rebound.Override) context.Context {
	return engine.WithOverride(ctx, o)
}
