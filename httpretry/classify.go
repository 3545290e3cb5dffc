package httpretry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/errtext"
)

// Idempotent reports whether req may be sent more than once: its method is
// idempotent under RFC 9110 (GET, HEAD, OPTIONS, TRACE, PUT, DELETE; an
// empty method means GET), or it carries an Idempotency-Key (or
// X-Idempotency-Key) header, the convention net/http also honours.
func Idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	_, ok := req.Header["X-Idempotency-Key"]
	return ok
}

// statusError is an attempt that got a response the Transport does not
// count as a success. It carries the response so that, when retrying stops,
// the response is returned as it came; once retrying goes on, the body is
// drained and closed and the response is no longer returned.
type statusError struct {
	resp      *http.Response
	info      rebound.RetryInfo
	discarded bool
	// overCap is a server hint (Retry-After, or a rate-limit reset)
	// beyond the cap, which ended retrying with
	// rebound.ErrRetryDelayTooLong; 0 otherwise. hint names its header.
	overCap time.Duration
	hint    string
}

func (e *statusError) Error() string {
	return "httpretry: response " + strconv.Itoa(e.resp.StatusCode) + " " + http.StatusText(e.resp.StatusCode)
}

// why says why a response beyond the cap was returned, for logs and
// traces: "Retry-After beyond cap".
func (e *statusError) why() string { return e.hint + " beyond cap" }

// RetryInfo lets [rebound.Classify] see the decision made for the response.
func (e *statusError) RetryInfo() rebound.RetryInfo { return e.info }

func (e *statusError) discard(ctx context.Context) {
	if !e.discarded {
		e.discarded = true
		discard(ctx, e.resp)
	}
}

// checkResponse returns nil when resp ends the request as a success, or a
// *statusError saying whether it may be retried. A status below 500 that is
// not retryable is a success; one of 500 or above fails without a retry, so
// that a server error does not refill the budget.
func (t *Transport) checkResponse(resp *http.Response, idempotent bool, retryable *statusSet) error {
	code := resp.StatusCode
	if retryable == nil {
		retryable = &t.cfg.status
	}
	if !retryable.has(code) {
		if code < 500 {
			return nil
		}
		return &statusError{resp: resp}
	}
	if !idempotent {
		return &statusError{resp: resp}
	}
	info := rebound.RetryInfo{
		Safety:   rebound.SafetyYes,
		SlowDown: code == http.StatusTooManyRequests,
		Timeout:  code == http.StatusGatewayTimeout,
	}
	// A server hint beyond the cap, whichever header sent it, asks for a
	// longer pause than the caller will wait: the response goes back now,
	// and retrying stops with a reason that says so.
	if v := resp.Header.Get("Retry-After"); v != "" {
		if d, ok := ParseRetryAfter(v, t.cfg.clock.Now()); ok {
			// A 503 that says when to come back is a throttle, as
			// WithAdaptiveRateLimit counts it.
			info.SlowDown = info.SlowDown || code == http.StatusServiceUnavailable
			if d > t.cfg.retryDelayCap {
				info.Stop = rebound.ErrRetryDelayTooLong
				return &statusError{resp: resp, info: info, overCap: d, hint: "Retry-After"}
			}
			info.HasRetryAfter, info.RetryAfter = true, t.spread(d)
		}
	} else if t.cfg.rateLimitReset {
		if d, name, ok := rateLimitReset(resp.Header, t.cfg.clock.Now()); ok {
			if d > t.cfg.retryDelayCap {
				info.Stop = rebound.ErrRetryDelayTooLong
				return &statusError{resp: resp, info: info, overCap: d, hint: name}
			}
			info.MinDelay = d
		}
	}
	return &statusError{resp: resp, info: info}
}

// spread returns how long to wait for a Retry-After of d: d, a minimum
// (Smithy's retry strategies may wait longer), plus up to half a second,
// or half of d when shorter, drawn from the Transport's random source.
// Retry-After counts in whole seconds, so a server that refuses many
// clients in the same second tells them all the same time; waiting
// exactly that long would bring them back in one wave.
func (t *Transport) spread(d time.Duration) time.Duration {
	u := rand.Float64()
	if t.cfg.random != nil {
		u = t.cfg.random.Float64()
	}
	return d + time.Duration(u*float64(min(d/2, 500*time.Millisecond)))
}

// checkError marks a transport error with whether it may be retried. A
// request that provably never reached the server (the dial failed) may be
// retried whatever its method; other connection errors only when the
// request is idempotent. Errors that are not connection errors (a bad URL,
// an untrusted certificate, an unknown host, the request's own context) are
// never retried.
func checkError(err error, idempotent bool) error {
	switch kind, timeout := connError(err); {
	case kind == connDial, kind == connOther && idempotent:
		return rebound.Mark(err, rebound.RetryInfo{Safety: rebound.SafetyYes, Timeout: timeout})
	}
	return rebound.Permanent(err)
}

type connKind int8

const (
	connNone  connKind = iota // not a connection error
	connDial                  // the connection was never made
	connOther                 // the connection failed once made
)

func connError(err error) (kind connKind, timeout bool) {
	var (
		dns  *net.DNSError
		cert *tls.CertificateVerificationError
		ua   x509.UnknownAuthorityError
		hn   x509.HostnameError
		ci   x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &dns) && dns.IsNotFound,
		errors.As(err, &cert), errors.As(err, &ua), errors.As(err, &hn), errors.As(err, &ci):
		return connNone, false
	}
	var ne net.Error
	timeout = errors.As(err, &ne) && ne.Timeout()
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial", errors.Is(err, syscall.ECONNREFUSED):
		return connDial, timeout
	case op != nil, timeout,
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return connOther, timeout
	}
	return connNone, false
}

// gaveUpError is the error RoundTrip returns when retrying stopped without
// a response to return. It unwraps to the [*rebound.Error] (and through it
// to the last attempt's error and the reason), and keeps the Timeout method
// that net/url's Error looks for.
type gaveUpError struct{ err error }

// Error returns why retrying stopped and the last attempt's error, like
// "httpretry: gave up after 3 attempts (attempts exhausted): dial tcp ...".
func (e *gaveUpError) Error() string {
	var re *rebound.Error
	if !errors.As(e.err, &re) {
		return "httpretry: " + e.err.Error()
	}
	return errtext.GaveUp("httpretry", re.Attempts, re.Reason, re.Err)
}

func (e *gaveUpError) Unwrap() error { return e.err }

// Timeout reports whether any error in the chain is a timeout, such as the
// context's deadline.
func (e *gaveUpError) Timeout() bool {
	if errors.Is(e.err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}
