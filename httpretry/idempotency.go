package httpretry

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"

	"github.com/rebound-go/rebound/internal/previous"
)

// requestHeaders are the headers the Transport adds to the attempts of a
// request: WithIdempotencyKey's and WithPreviousAttemptsHeader's.
type requestHeaders struct {
	key      string        // the idempotency key's header; "" for none
	generate func() string // makes a key
	previous string        // the previous attempts' header; "" for none
}

// WithIdempotencyKey gives every request that is not idempotent (see
// [WithIdempotent]) a key in the header name, and so makes it retryable: a POST to
// a payment API, say, whose server keeps the outcome of each key and
// answers a repeated request with it instead of acting twice. The key is
// made once per request by generate, before the first attempt, and the
// same key goes with every attempt and every hedge of it. A request that
// already carries that header keeps its own key, and is retryable too.
//
// name must be a valid header name, such as "Idempotency-Key" (the
// IETF draft's, and Stripe's). generate must be safe for concurrent use
// and return a key unique to the request, a valid header value that is
// not empty; nil means a random UUID (version 4). A request whose key
// generate gets wrong fails with an error naming this option, unsent.
func WithIdempotencyKey(name string, generate func() string) Option {
	return optionFunc(func(c *config) {
		if !validHeaderName(name) {
			c.fail("WithIdempotencyKey", "name %q is not a valid header name", name)
			return
		}
		if generate == nil {
			generate = uuid4
		}
		c.headers.key, c.headers.generate = http.CanonicalHeaderKey(name), generate
	})
}

// WithPreviousAttemptsHeader sends, in header name, how many attempts of
// the request were sent before this one, as gRFC A6's
// grpc-previous-rpc-attempts does for gRPC: on every retry and every
// hedge, and not on the first attempt, which goes out as the caller made
// it. A server reads it with [PreviousAttempts], as it reads A6's header
// with grpcretry.PreviousAttempts and connectretry.PreviousAttempts, so
// that it can tell a retry from a first attempt (and log or shed it
// apart). name must be a valid header name, such as
// "Rebound-Previous-Attempts".
func WithPreviousAttemptsHeader(name string) Option {
	return optionFunc(func(c *config) {
		if !validHeaderName(name) {
			c.fail("WithPreviousAttemptsHeader", "name %q is not a valid header name", name)
			return
		}
		c.headers.previous = http.CanonicalHeaderKey(name)
	})
}

// PreviousAttempts returns, in a handler, how many attempts of this
// request came before this one, from header name that a Transport with
// [WithPreviousAttemptsHeader] sets on retries and hedges: 0 on the first
// attempt, or when the header is missing, repeated or not a non-negative
// integer. Pass the request's header, like PreviousAttempts(r.Header,
// "Rebound-Previous-Attempts").
func PreviousAttempts(h http.Header, name string) int {
	return previous.Parse(h.Values(name))
}

// keyed gives out's requests an idempotency key when they need one, and
// reports whether the request is idempotent now. It never modifies the
// caller's request: out.first gets a header of its own.
func (h *requestHeaders) keyed(out *outgoing, idempotent bool) (bool, error) {
	if h.key == "" || idempotent {
		return idempotent, nil
	}
	if _, ok := out.first.Header[h.key]; ok {
		return true, nil
	}
	key := h.generate()
	if !validHeaderValue(key) {
		return false, fmt.Errorf("httpretry: WithIdempotencyKey: generate returned %q, not a header value", key)
	}
	r := new(http.Request)
	*r = *out.first
	r.Header = out.first.Header.Clone()
	if r.Header == nil {
		r.Header = http.Header{}
	}
	r.Header[h.key] = []string{key}
	out.first = r
	return true, nil
}

// numbered returns r, attempt n of its request, with the previous
// attempts' header set to n-1, or r itself for the first attempt and
// without that option. The copy has a header of its own, as attempts that
// overlap must not share one that differs.
func (h *requestHeaders) numbered(r *http.Request, n int) *http.Request {
	if h.previous == "" || n <= 1 {
		return r
	}
	c := new(http.Request)
	*c = *r
	c.Header = r.Header.Clone()
	if c.Header == nil {
		c.Header = http.Header{}
	}
	c.Header[h.previous] = []string{strconv.Itoa(n - 1)}
	return c
}

// uuid4 returns a random UUID, version 4 (RFC 9562).
func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, v := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[v>>4], hex[v&0xf])
	}
	return string(out)
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c < 0x80 && c > ' ' && c != 0x7f && !isSeparator(c):
		default:
			return false
		}
	}
	return true
}

func isSeparator(c byte) bool {
	for i := 0; i < len(`"(),/:;<=>?@[\]{}`); i++ {
		if c == `"(),/:;<=>?@[\]{}`[i] {
			return true
		}
	}
	return false
}

// validHeaderValue reports whether s is a non-empty header value without
// control characters or surrounding space.
func validHeaderValue(s string) bool {
	if s == "" || s[0] == ' ' || s[0] == '\t' || s[len(s)-1] == ' ' || s[len(s)-1] == '\t' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
