// Package httpretry is rebound's front door for net/http: a
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
//
// [Transport.Stats] returns the retry statistics of gRFC A6 per method and
// host ("GET example.com"): retry and hedge attempts, how many failed,
// their histogram by ordinal, the requests the budget refused, and the
// retries a Retry-After hint delayed. [WithMeterProvider] records the
// OpenTelemetry instruments of gRFC A96 (grpc.client.call.retries,
// grpc.client.call.hedges, grpc.client.call.retry_delay) with grpc.method
// set to that name and grpc.target to the host, and [WithLogger] writes one
// debug record per decision: a retry scheduled, a hedge sent, a response
// returned as it is, or giving up and why. Every request is recorded when
// its RoundTrip returns. Hedged attempts overlap, so the delay of hedged
// requests is not measured.
package httpretry
