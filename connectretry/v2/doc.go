// Package connectretry gives clients of connect-go v2
// (connectrpc.com/connect/v2) rebound's retries: a connect.ClientInterceptor
// that retries and hedges calls as a gRPC service config says (gRFC A6),
// with the option names, meanings and engine of connectretry for connect
// v1 (github.com/rebound-go/rebound/connectretry), and of grpcretry.
//
//	cfg, err := serviceconfig.Parse(serviceConfigJSON)
//	...
//	client := pingv1connect.NewPingServiceClient(connect.NewClient(
//		connecthttp.NewTransport(httpClient, url),
//		connectretry.NewInterceptor(cfg).WrapClient))
//
// Its import path ends in /v2, as connect's does; its name is connectretry.
// A program that imports it does not compile connect v1, nor connectretry
// for v1, and the reverse: the two share rebound's engine, which imports
// neither major, so a module can move its services from v1 to v2 one at a
// time.
//
// # What is retried
//
// The method config is found by the call's procedure, "/pkg.Service/Method",
// just as for gRPC; every transport behaves the same (connecthttp's Connect,
// gRPC and gRPC-Web protocols, and connectinprocess), and connect status
// codes are gRPC status codes.
//
//   - Unary calls follow the method's retryPolicy or hedgingPolicy.
//   - Streaming calls of every shape (server, client and bidirectional)
//     follow its retryPolicy until they commit: until the first response
//     message arrives, or the response ends cleanly without one. From then
//     on the call is committed to that attempt, and a later failure is
//     returned as it is. Before, each new attempt is sent the request
//     messages the application sent so far, and its SendHeaders and
//     CloseSend, again: the stream keeps each message it sends, as its
//     protobuf encoding, within [WithBufferLimits] (A6 "Memory
//     Management"); a message that would pass the limits, or that is not
//     a protobuf message, commits the call to the attempt in flight.
//   - Streams under a hedgingPolicy hold their request until it is
//     complete: Send keeps each message and sends nothing, and CloseSend
//     starts the hedges, the first attempt and, after the hedging delay
//     (or at once, after a non-fatal failure), others, each sent the whole
//     request. The first attempt to receive a message, or to end cleanly,
//     wins; the others are cancelled. A stream whose request cannot be
//     held (the limits, as above), or that receives before its request is
//     closed (a bidirectional stream reading as it writes), is sent to its
//     first attempt as it goes, and made once.
//
// connect v2 hands a response's headers to the application only through
// the call's connect.CallInfo, once Receive returns: the first Receive that
// returns is therefore the commit point, also for the per-attempt timeout
// ([WithPerAttemptTimeout]), which in connect v1 stops at the response
// headers already.
//
// Interceptors listed after this one in connect.NewClient run once per
// attempt; those before it once per call.
//
// # What is safe to retry
//
// A service config names status codes, not whether a procedure may run
// twice: that is the service owner's knowledge, and the interceptor follows
// the config as connectretry for v1 does, so that a service keeps its
// retries when it moves to v2. AIP-194 says to retry automatically only
// unary calls that are idempotent or free of side effects, which a v2
// Spec carries as its IdempotencyLevel (the idempotency_level option of the
// protobuf method). [AIP194Services] builds the service config of that safe
// default set from the services' descriptors, [AIP194] from specs, and
// [Idempotent] tells whether one procedure belongs to it. Configure other
// procedures, or hedging, only when running them twice is harmless; a
// stream that is retried runs its handler again with the messages sent so
// far.
//
// # Retry at one layer
//
// A connect v2 error says whether it is a peer's verdict
// ((*connect.Error).IsRemote), and v2's server transports will not send a
// remote error as a handler's own: a handler that returns the error of a
// call it made to its own backend sends its caller CodeInternal, with no
// message. The error of a call that gave up here keeps the last attempt's
// error as it was, remote when the server sent it; so a handler that
// passes it on sends CodeInternal, and a client that retries the
// handler's unavailable does not retry again what this interceptor
// retried already: the backend sees the attempts of one layer, not their
// product. Errors rebound makes itself (a per-attempt timeout, a refusal
// of the adaptive throttle or rate limit) are the handler's own, and go
// on as they are. A handler that wants its callers to retry says so with
// an error of its own.
//
// # Semantics
//
//   - Backoff, maxAttempts (clamped by [WithMaxAttemptsCap], 5 by default),
//     retryable and non-fatal codes, and hedging delays are A6's, run by
//     rebound's engine ([rebound.Retrier], [rebound.Hedge]).
//   - Pushback: the server's grpc-retry-pushback-ms is read from the
//     attempt's response trailer, or else its header (where a connect v1
//     server puts the metadata of a Connect protocol unary error). A valid
//     value sets the next delay exactly; a negative or malformed one stops
//     retrying.
//   - Throttling: a retryThrottling setting keeps one token count per server
//     name, shared by every Interceptor of the process (see
//     [WithServerName]; by default the peer address of the call's
//     connect.CallInfo).
//   - Every attempt after the first carries the request header
//     grpc-previous-rpc-attempts; a handler reads it with [PreviousAttempts].
//   - The caller's context deadline covers all attempts, and no delay is
//     slept that would pass it. The method config's timeout applies when it
//     is shorter. Its waitForReady and message size limits are not applied:
//     connecthttp sets size limits per transport.
//   - A call that ends in failure after a policy governed it returns an
//     error whose text says why retrying stopped, which unwraps to the last
//     attempt's *connect.Error and through it to a [rebound.Error] with the
//     number of attempts and the reason. [CountAttempts] reports the number
//     of attempts of any call.
//
// # Metadata
//
// The first attempt of a call runs on the caller's connect.CallInfo. A
// retry, or any hedged attempt, runs on a CallInfo of its own, with a copy
// of the caller's request header and the attempts header; when the call
// ends on it, its response header and trailer, peer and encodings are
// copied into the caller's CallInfo, which so describes the attempt the
// call ended with (its SendStats stay the first attempt's). The caller's
// request header is never modified.
//
// # Seeing retries
//
// [Interceptor.Stats] returns the retry statistics of gRFC A6 by procedure.
// [WithMeterProvider] records them as OpenTelemetry instruments,
// [WithLogger] writes one debug record per decision, and
// [WithTracerProvider] traces each call with a span per attempt (gRFC A72),
// all as connectretry for v1 does.
//
// # Requests
//
// A unary request message is marshaled again for each attempt, so it must
// not change until the call returns; hedged attempts marshal it at the same
// time. A stream keeps each message it sends as its encoding, made in
// Send, so a retry is sent exactly what the application sent, whatever it
// does with the message after; the transport's own rule for that still
// holds for the attempt in flight (connectinprocess hands the message
// itself to the handler, which reads it after Send has returned).
package connectretry
