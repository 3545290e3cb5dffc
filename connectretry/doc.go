// Package connectretry gives connect-go clients rebound's retries: a
// [connect.Interceptor] that retries and hedges client calls as a gRPC
// service config says (gRFC A6), with the semantics of package grpcretry.
//
//	cfg, err := serviceconfig.Parse(serviceConfigJSON)
//	...
//	client := pingv1connect.NewPingServiceClient(httpClient, url,
//		connect.WithInterceptors(connectretry.NewInterceptor(cfg)))
//
// # What is retried
//
// The method config is found by the call's procedure, "/pkg.Service/Method",
// just as for gRPC; the three protocols (Connect, gRPC, gRPC-Web) behave the
// same, and connect status codes are gRPC status codes.
//
//   - Unary calls follow the method's retryPolicy or hedgingPolicy.
//   - Streaming calls of every shape (server, client and bidirectional)
//     follow its retryPolicy until they commit: until the first response
//     message arrives, or the application reads the response header or
//     trailer. From then on the call is committed to that attempt, and a
//     later failure is returned as it is. A stream that ends cleanly
//     without a message succeeds. Each new attempt is sent the request
//     messages the application sent so far, and its CloseRequest, again:
//     the stream keeps each message it sends, as its protobuf encoding,
//     within [WithBufferLimits] (A6 "Memory Management"); a message that
//     would pass the limits, or that is not a protobuf message, commits the
//     call to the attempt in flight.
//   - Streams under a hedgingPolicy hold their request until it is
//     complete: Send keeps each message and sends nothing, and
//     CloseRequest starts the hedges, the first attempt and, after the
//     hedging delay (or at once, after a non-fatal failure), others, each
//     sent the whole request. The first attempt to receive a message, or
//     to end cleanly, wins; the others are cancelled. A stream whose
//     request cannot be held (the limits, as above), or that is read
//     before its request is closed (a bidirectional stream reading as it
//     writes), is sent to its first attempt as it goes, and made once; so
//     is one whose response header is read before it has a winner, which
//     commits it to the attempt in flight.
//
// [WithPerAttemptTimeout] (or the retryPolicy's perAttemptRecvTimeout) cuts
// and retries an attempt that has not answered in time, and [Override]
// narrows one call's policy.
//
// Interceptors listed after this one in connect.WithInterceptors run once
// per attempt; those before it once per call.
//
// # What is safe to retry
//
// A service config names status codes, not whether a procedure may run
// twice: that is the service owner's knowledge. AIP-194 says to retry
// automatically only unary calls that are idempotent or free of side
// effects, which connect-go procedures declare with connect.IdempotencyLevel
// (the idempotency_level option of a protobuf method); a stream that is
// retried runs its handler again with the messages sent so far. [AIP194] and
// [AIP194Services] build the service config of that safe default set, and
// [Idempotent] tells whether one procedure belongs to it. Configure other
// procedures, or hedging, only when running them twice is harmless.
//
// # Semantics
//
//   - Backoff, maxAttempts (clamped by [WithMaxAttemptsCap], 5 by default),
//     retryable and non-fatal codes, and hedging delays are A6's, run by
//     rebound's engine ([rebound.Retrier], [rebound.Hedge]).
//   - Pushback: the server's grpc-retry-pushback-ms is read from the
//     error's metadata (connect.Error.Meta, the union of response headers
//     and trailers, so a gRPC trailer and a Connect header both count). A
//     valid value sets the next delay exactly; a negative or malformed one
//     stops retrying.
//   - Throttling: a retryThrottling setting keeps one token count per server
//     name, shared by every Interceptor of the process (see
//     [WithServerName]; by default the host of the client's URL).
//   - Every attempt after the first carries the request header
//     grpc-previous-rpc-attempts; a handler reads it with [PreviousAttempts].
//   - The caller's context deadline covers all attempts, and no delay is
//     slept that would pass it. The method config's timeout applies when it
//     is shorter. Its waitForReady and message size limits are not applied:
//     connect sets size limits per client (connect.WithReadMaxBytes,
//     connect.WithSendMaxBytes).
//   - A call that ends in failure after a policy governed it returns an
//     error whose text says why, as grpcretry's and httpretry's do
//     ("connectretry: gave up after 3 attempts (attempts exhausted):
//     unavailable: busy"). It unwraps to a *connect.Error with the last
//     attempt's code, message, details and metadata (connect.CodeOf and
//     errors.As see it; a handler that passes the error on sends that), and
//     to a [rebound.Error] with the number of attempts and why retrying
//     stopped. [CountAttempts] reports the number of attempts of any call.
//
// # Seeing retries
//
// [Interceptor.Stats] returns the retry statistics of gRFC A6 by procedure:
// how many retry (or hedged) attempts calls made, how many of those failed,
// their histogram by ordinal (1st, 2nd, …, 5th–9th, …), and how many calls
// the throttle refused or server pushback delayed or stopped.
// [WithMeterProvider] records the same as the OpenTelemetry instruments of
// gRFC A96 (grpc.client.call.retries, grpc.client.call.hedges,
// grpc.client.call.retry_delay) and rebound's own
// (rebound.client.call.retries_throttled, .retries_pushback_stopped,
// .attempt_timeouts), with the attributes grpc.method, grpc.target and
// rpc.system.name "connectrpc", and [WithLogger] writes one debug record
// per decision: a retry scheduled, a hedge sent, a stream committed, or
// giving up and why. A unary call is recorded when it returns, a stream
// when it commits to an attempt (or fails before one); calls that no policy
// governs are not recorded. Hedged attempts overlap, so the delay of hedged
// calls is not measured. [WithTracerProvider] traces each call with a span
// per attempt, as grpcretry does (gRFC A72).
//
// # Differences from grpcretry
//
// grpc-go hands response headers to the application as soon as they
// arrive, so A6 commits a call once it has them. connect hands nothing of a
// unary response to the application before the call returns; a unary
// attempt that fails after sending headers is therefore still retried. For
// streams the commit points are those listed above: not response headers
// as such, since in the Connect protocol every response starts with
// headers, a failed one included.
//
// # Requests
//
// The caller's request is never modified by a retry: each retry, and each
// hedged attempt, gets a copy of its header (interceptors after this one
// see a connect.AnyRequest of another type, with the same methods and
// values). A unary request message is marshaled again for each attempt, so
// it must not change until the call returns; nothing of it is buffered. A
// stream's messages are kept as their encodings, so the application may
// reuse a message once Send returns. A connect.CallInfo from
// connect.NewClientContext describes the last attempt of a retried call;
// for a hedged call it is not filled in, because attempts run at the same
// time: read the response's Header and Trailer instead.
//
// # Hedged server streams
//
// connect-go v1's Client.CallServerStream records the HTTP method on the
// caller's connect.Request from every stream the interceptors open for
// it, as that stream makes its request (in Send, which returns once the
// response headers arrive). Hedged attempts that made their requests at
// the same time would write it together, a data race that -race reports.
// So the attempts of a hedged server stream make their requests in turn:
// each waits until the attempt before it has handed its request to the
// HTTP client's transport, which net/http's Client tells through the
// request context's httptrace hooks before it waits on the network. A
// hedge therefore goes out on time, however long an earlier attempt's
// server takes to answer. Over a connect.HTTPClient that calls no
// httptrace hook (GetConn, GotConn or WroteHeaders), a hedge
// waits instead until the attempt before it has its response headers or
// has failed. Unary calls, whose attempts each get a request of their own,
// and client and bidirectional streams, for which connect records
// nothing, go out at once.
package connectretry
