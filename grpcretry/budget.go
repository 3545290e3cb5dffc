package grpcretry

import "github.com/rebound-go/rebound"

// WithBudget adds b to what retries and hedges must get past: every retry
// and every hedge of the client's calls needs b's leave as well as the
// service config's retryThrottling, when it has one ([rebound.AllBudgets]).
// b is shared by all of the client's targets and methods; to budget per
// server, give each its own Client. A nil b means none.
//
// Streams spend b as unary calls do, and a [rebound.CallBudget] (a
// [rebound.RatioBudget] or [rebound.ConcurrencyBudget]) counts them among
// the calls its retries are measured against: a stream is in flight until
// it ends, and its retry or winning hedge with it. Calls under an
// adaptive hedging delay ([WithAdaptiveHedging]) spend b too, beside the
// method's own cap on hedges.
func WithBudget(b rebound.Budget) Option {
	return optionFunc(func(o *options) { o.Budget = b })
}
