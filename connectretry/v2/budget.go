package connectretry

import (
	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry/internal/engine"
)

// WithBudget adds b to what retries and hedges must get past: every retry
// and every hedge of the interceptor's calls needs b's leave as well as the
// service config's retryThrottling, when it has one ([rebound.AllBudgets]).
// b is shared by all of the interceptor's servers and procedures; to
// budget per server, give each its own Interceptor. A
// [rebound.RatioBudget] or [rebound.ConcurrencyBudget] is told of each
// call and its retries and hedges. A nil b means none.
func WithBudget(b rebound.Budget) Option {
	return optionFunc(func(o *engine.Options) { o.Budget = b })
}
