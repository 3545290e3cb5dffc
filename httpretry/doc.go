// Package httpretry gives net/http clients rebound's retries: a
// [http.RoundTripper] that retries requests with the rebound engine.
//
//	client := &http.Client{Transport: httpretry.NewTransport(nil)}
//
// [NewTransport] wraps a base RoundTripper. Every attempt's outcome is
// turned into what a [rebound.Strategy] needs: retryable status codes and
// connection errors carry a [rebound.RetryInfo] (a 429 is a throttle, a 504
// a timeout, a Retry-After header a minimum delay), and the retry loop is
// [rebound.DoValue] with the Smithy standard strategy, or [rebound.Hedge]
// with [WithHedging]. Whether a request may be sent twice follows RFC 9110's
// idempotent methods and the Idempotency-Key header ([Idempotent]).
// [WithPerAttemptTimeout] cuts and retries an attempt whose response
// headers have not arrived in time (a request that may have reached the
// server only when it is idempotent), and [Override] narrows the
// policy of one request.
//
// [CountAttempts] reports how many attempts a request made, hedges
// included. When attempts run out on a retryable status, the last
// response is returned as it is, with a nil error; when no response came,
// the error unwraps to a [*rebound.Error]: the number of attempts and why
// retrying stopped ([rebound.ErrAttemptsExhausted], [rebound.ErrThrottled],
// ...). [New] returns an invalid option's error at once; [NewTransport]
// keeps it in [Transport.Err], and every request fails with it.
//
// [Transport.Stats] returns the retry statistics of gRFC A6 per method and
// host ("GET example.com"): retry and hedge attempts, how many failed,
// their histogram by ordinal, the requests the budget refused, and the
// retries a Retry-After hint delayed. [WithLogger] writes one debug record
// per decision: a retry scheduled, a hedge sent, a response returned as it
// is, or giving up and why. Every request is recorded when its RoundTrip
// returns. [WithTracerProvider] traces each request with a span per
// attempt, named and attributed by the OpenTelemetry HTTP conventions.
//
// [WithMeterProvider] records rebound's own instruments: neither gRFC A96
// nor the OpenTelemetry HTTP semantic conventions define any for HTTP
// retries, so they are in rebound's namespace, not http.*:
//
//	rebound.client.call.retries                  histogram {retry}   retries of a request that had any
//	rebound.client.call.hedges                   histogram {hedge}   hedges of a request that had any
//	rebound.client.call.retry_delay              histogram s         time with no attempt in flight
//	rebound.client.call.retries_throttled        counter   {retry}   requests whose retry the budget refused
//	rebound.client.call.retries_pushback_stopped counter   {retry}   requests a strategy stopped on pushback
//	rebound.client.call.attempt_timeouts         counter   {attempt} attempts cut by WithPerAttemptTimeout
//
// The first three are A96's grpc.client.call.retries, .hedges and
// .retry_delay, which grpcretry and connectretry record, for HTTP; the last
// three grpcretry and connectretry record under the same names. HTTP has
// no transparent retries. Their attributes are the HTTP conventions':
// http.request.method (a method the conventions do not know is "_OTHER"),
// server.address and server.port (the request URL's host, and its port or
// the scheme's default), and http.response.status_code of the response
// returned, left out when RoundTrip returns an error. Past 1024 method and
// host pairs, as in Stats, requests are recorded with server.address
// "(other)" and no port. Hedged attempts overlap, so the delay of hedged
// requests is not measured.
package httpretry
