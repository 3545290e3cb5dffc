// Package grpcretry gives grpc-go clients rebound's retries: client
// interceptors that give a ClientConn the whole gRPC retry design (gRFC A6)
// from a service config parsed by package serviceconfig.
//
//	conn, err := grpc.NewClient(target, append(grpcretry.DialOptions(cfg), creds)...)
//
// Unary calls under a retryPolicy are retried on its retryable codes with
// A6's backoff, within the call's deadline, obeying server pushback and the
// retryThrottling of the server name, and committed once response headers
// arrive. [WithPerAttemptTimeout] (or perAttemptRecvTimeout) cuts and
// retries an attempt that has not committed in time. Under a
// hedgingPolicy they are hedged: the first success wins and the other
// attempts are cancelled; the rebound_distinct balancer (package distinct)
// sends hedges and retries to backends the call has not used, and
// [WithAdaptiveHedging] makes the delay follow observed latency. The
// [Override] call option narrows one call's policy.
//
// Streaming calls of every kind are retried and hedged too: the messages
// the application sends are buffered and replayed on a new attempt until
// the call commits (a response arrives, the application reads headers, or
// the buffer would outgrow [WithBufferLimits]).
//
// [DialOptions] also hands grpc-go the config's loadBalancingConfig and
// healthCheckConfig, so that a config naming the rebound_distinct balancer
// needs no further option, and an invalid option or unknown balancer makes
// grpc.NewClient fail. [New] and [Client.DialOptions] do the same in two
// steps, with the options' errors returned at once.
//
// # Service configs from the name resolver
//
// A6 delivers the service config with name resolution, so that a service
// owner changes every client's retries without a redeploy. [DialOptions]
// takes the config the conn's resolver delivers, as grpc-go does: for a
// DNS target (grpc.NewClient's default scheme, reading the TXT record of
// _grpc_config.<name>) the one line above is all it takes; a custom
// resolver is passed with [WithResolver] instead of grpc.WithResolvers.
// The resolver's config replaces the one given in code, which is the
// default until the resolver delivers one (the first call waits for the
// resolver, as in grpc-go); grpc.WithDisableServiceConfig keeps the
// code's. Calls started after an update run under the new config, calls
// in flight keep their policy, and a throttle stays shared while the
// server name and its retryThrottling settings stay the same. An invalid
// config never fails calls: the last good one stays in force, and the
// error is logged and counted ([Client.ResolverConfigErrors]).
//
// grpc-go's own retries stay on, but rebound never hands grpc-go a
// retryPolicy: grpc-go sees only the load-balancing and health-check
// fields of the code's config and of a wrapped resolver's, so a call is
// retried in one place. A retryPolicy may still reach grpc-go directly:
// with grpc.WithDefaultServiceConfig (in either order with DialOptions:
// grpc-go applies its default when the resolver delivers no config), as
// when moving from grpc-go's retries to rebound's, or from a resolver
// not passed with WithResolver. grpc-go would then retry each of
// rebound's attempts, maxAttempts² in all. It cannot turn its retries off
// for one call, and grpc.WithDisableRetry would also drop the xDS routes'
// policies (below), so rebound does not share the method: a call that
// rebound would retry or hedge fails, before any attempt, with
// codes.Internal and a message that names the conflict and the fix (leave
// the retryPolicy out of grpc.WithDefaultServiceConfig; pass a custom
// resolver with WithResolver). rebound reads the config grpc-go applies
// with ClientConn.GetMethodConfig; the first call of a method waits, as
// a call of grpc-go's own does, until grpc-go has applied the conn's
// config, and its answer holds for the method until the conn's resolver
// delivers a new config through rebound's wrapper. A method that rebound
// has no policy for is left to grpc-go's retries, and a conn made with
// grpc.WithDisableRetry has no conflict. A resolver that rebound
// does not wrap may hand grpc-go a retryPolicy after a method's first
// call, unseen: pass it with WithResolver. grpc-go's transparent retries
// of streams the server never processed happen below these interceptors
// too; they count against neither maxAttempts nor the throttle.
//
// # xDS targets
//
// On an xds:/// target, grpc-go's xds resolver gives grpc-go the retry
// policies of the xDS routes (gRFC A44), which rebound cannot see, and
// grpc-go applies them to every attempt, as it does without rebound; so
// do its transparent retries. Above them rebound applies the config given
// in code, and only that: its retry and hedging policies, retryThrottling,
// server pushback, buffer limits, the per-attempt timeout, statistics and
// metrics. Give each method its retries in one place: leave them to the
// xDS route and give rebound only what xDS lacks (a hedgingPolicy,
// retryThrottling, [WithAdaptiveHedging]), or give rebound the retryPolicy
// and leave it out of the route. With both, grpc-go retries every attempt
// rebound makes, hedges included, and the attempts multiply.
//
// # Attempts, errors and statistics
//
// The [CountAttempts] call option reports how many attempts a call made,
// hedges included. A call that fails returns the last attempt's status
// (status.Code sees it) as an error that unwraps to a [*rebound.Error]:
// the number of attempts and why retrying stopped
// ([rebound.ErrAttemptsExhausted], [rebound.ErrThrottled], ...).
// [Client.Stats], or [StatsOf] for a conn made with [DialOptions], returns
// the statistics by method; [WithMeterProvider] and [WithLogger] report the
// same as metrics and as a log of each decision; [WithTracerProvider]
// traces each call with a span per attempt (gRFC A72).
//
// # Differences from grpc-go
//
// Every scenario of grpc-go's own retry tests behaves the same through
// these interceptors (the package's tests replay them), except for three
// deliberate differences:
//
//   - Calling a stream's Context method does not commit the stream. A6
//     commits a call when response headers or a message arrive, or when
//     its messages outgrow the buffer; grpc-go also commits on Context,
//     which would end retries for any code that merely reads the context.
//   - [WithMaxAttemptsCap] below 1 is an error from [New], where
//     grpc.WithMaxCallAttempts takes it to mean the default of 5: a
//     mistyped limit should not go unnoticed.
//   - A call that ran out of attempts says "attempts exhausted" and
//     matches errors.Is(err, rebound.ErrAttemptsExhausted), rather than
//     grpc-go's "retries exhausted" text; its status code is the same.
package grpcretry
