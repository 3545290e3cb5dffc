// Package hedgehook lets a front door act at the instant an attempt of
// rebound.Hedge wins the call, before the other attempts hear of it: so that
// a trace records the commit before the ends of the attempts it cancels.
// Package rebound sets Commit when it is initialized.
package hedgehook

import "context"

// Commit is rebound.Commit, which also calls then(ctx), when ctx's attempt
// wins the commit, before the hedging machinery is told and cancels the
// other attempts. then runs on the caller's goroutine, once at most; it is
// not called when another attempt committed first or ctx is not a hedged
// attempt's. (then takes ctx so that a function, not a closure, does:
// nothing is allocated.)
var Commit func(ctx context.Context, then func(context.Context)) bool
