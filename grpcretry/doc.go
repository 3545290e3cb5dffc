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
// grpc-go's own retries are turned off ([DialOptions] adds
// grpc.WithDisableRetry), but its transparent retries of streams the server
// never processed still happen below these interceptors; they count against
// neither maxAttempts nor the throttle.
//
// Every scenario of grpc-go's own retry tests behaves the same through
// these interceptors (the package's tests replay them), except for three
// deliberate differences:
//
//   - Calling a stream's Context method does not commit the stream. A6
//     commits a call when response headers or a message arrive, or when
//     its messages outgrow the buffer; grpc-go also commits on Context,
//     which would end retries for any code that merely reads the context.
//   - [WithMaxAttempts] below 1 is an error from [New], where
//     grpc.WithMaxCallAttempts takes it to mean the default of 5: a
//     mistyped limit should not go unnoticed.
//   - A call that ran out of attempts says "attempts exhausted" and
//     matches errors.Is(err, rebound.ErrAttemptsExhausted), rather than
//     grpc-go's "retries exhausted" text; its status code is the same.
//
// [DialOptions] also hands grpc-go the config's loadBalancingConfig and
// healthCheckConfig, so that a config naming the rebound_distinct balancer
// needs no further option, and an invalid option or unknown balancer makes
// grpc.NewClient fail. [New] and [Client.DialOptions] do the same in two
// steps, with the options' errors returned at once.
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
package grpcretry
