// Package grpcretry is rebound's front door for grpc-go: client
// interceptors that give a ClientConn the whole gRPC retry design (gRFC A6)
// from a service config parsed by package serviceconfig.
//
//	conn, err := grpc.NewClient(target, append(grpcretry.DialOptions(cfg), creds)...)
//
// Unary calls under a retryPolicy are retried on its retryable codes with
// A6's backoff, within the call's deadline, obeying server pushback and the
// retryThrottling of the server name, and committed once response headers
// arrive. Under a hedgingPolicy they are hedged: the first success wins and
// the other attempts are cancelled; the rebound_distinct balancer (package
// distinct) sends hedges to backends the call has not used, and
// [WithAdaptiveHedging] makes the delay follow observed latency.
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
// A call's attempts are reported by the [CountAttempts] call option, and a
// failed call returns an error that is the last attempt's status and
// says why retrying stopped.
package grpcretry
