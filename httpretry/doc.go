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
package httpretry
