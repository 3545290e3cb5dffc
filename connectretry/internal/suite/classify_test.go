package suite

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestClassifier(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     code
		meta     string // x-retry: the server's hint to the classifier
		attempts int
		reason   error
	}{
		{"promotes a code the policy does not list", serviceconfig.Internal, "yes", 3, rebound.ErrAttemptsExhausted},
		{"demotes a listed code", serviceconfig.Unavailable, "no", 1, rebound.ErrNotRetryable},
		{"leaves the rest", serviceconfig.Unavailable, "", 3, rebound.ErrAttemptsExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, e env) {
				s := e.start(t, handlers{unary: func(*call) (string, error) {
					return "", fail(tc.code, "fails").with("x-retry", tc.meta)
				}})
				c, _ := e.dialAuto(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), withClassifier(func(f failed, v rebound.RetryInfo) rebound.RetryInfo {
					if f.procedure != unary || f.code != tc.code || f.message != "fails" {
						t.Errorf("classifier saw %+v", f)
					}
					switch f.meta("x-retry") {
					case "yes":
						v.Safety = rebound.SafetyYes
					case "no":
						v.Safety = rebound.SafetyNo
					}
					return v
				}))
				_, err := c.unary(context.Background(), "x", nil)
				if got := s.count(unary); got != tc.attempts || !errors.Is(err, tc.reason) || e.codeOf(err) != tc.code {
					t.Fatalf("%d attempts, err %v; want %d, reason %v", got, err, tc.attempts, tc.reason)
				}
			})
		})
	}
}

// TestClassifierStream: the classifier judges a stream's failed attempts
// too, with the metadata of the stream's trailer.
func TestClassifierStream(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{serverStream: func(*call, func(string) error) error {
			return fail(serviceconfig.Internal, "fails").with("x-retry", "yes")
		}})
		c, _ := e.dialAuto(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), withClassifier(func(f failed, v rebound.RetryInfo) rebound.RetryInfo {
			if f.meta("x-retry") == "yes" {
				v.Safety = rebound.SafetyYes
			}
			return v
		}))
		st, err := c.open(context.Background(), serverStream, "x", nil)
		if err == nil {
			_, err = receiveAll(t, st)
		}
		if got := s.count(serverStream); got != 3 || !errors.Is(err, rebound.ErrAttemptsExhausted) {
			t.Fatalf("%d attempts, err %v; want 3, attempts exhausted", got, err)
		}
	})
}

// TestClassifierGuardrails: the classifier cannot undo the server's
// pushback "stop", cannot start retries for a procedure no policy governs
// (it is not even asked), and a class it names has its own attempt limit,
// as in grpcretry and httpretry.
func TestClassifierGuardrails(t *testing.T) {
	retryAll := func(_ failed, v rebound.RetryInfo) rebound.RetryInfo {
		v.Safety = rebound.SafetyYes
		v.Committed, v.ServerStop = false, false // attempts to undo: ignored
		return v
	}
	for _, tc := range []struct {
		name     string
		cfg      string // the service the policy names
		pushback string
		classify func(t *testing.T) func(failed, rebound.RetryInfo) rebound.RetryInfo
		attempts int
		reason   error
	}{
		{"cannot undo pushback stop", service, "-1", func(*testing.T) func(failed, rebound.RetryInfo) rebound.RetryInfo { return retryAll }, 1, rebound.ErrPushback},
		{"cannot promote without a policy", "other.Service", "", func(t *testing.T) func(failed, rebound.RetryInfo) rebound.RetryInfo {
			return func(f failed, v rebound.RetryInfo) rebound.RetryInfo {
				t.Errorf("classifier asked about %s, which no policy governs", f.procedure)
				return retryAll(f, v)
			}
		}, 1, nil},
		{"a class with its own limit", service, "", func(*testing.T) func(failed, rebound.RetryInfo) rebound.RetryInfo {
			return func(_ failed, v rebound.RetryInfo) rebound.RetryInfo {
				v.Class, v.ClassAttempts = "busy", 2
				return v
			}
		}, 2, rebound.ErrAttemptsExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, e env) {
				s := e.start(t, handlers{unary: func(*call) (string, error) {
					f := fail(serviceconfig.Unavailable, "fails")
					if tc.pushback != "" {
						f.with("grpc-retry-pushback-ms", tc.pushback)
					}
					return "", f
				}})
				cfg := parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
					"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
					"retryableStatusCodes":["UNAVAILABLE"]}}]}`, tc.cfg))
				c, _ := e.dialAuto(t, s, cfg, withClassifier(tc.classify(t)))
				_, err := c.unary(context.Background(), "x", nil)
				if got := s.count(unary); got != tc.attempts || e.codeOf(err) != serviceconfig.Unavailable {
					t.Fatalf("%d attempts, err %v; want %d, UNAVAILABLE", got, err, tc.attempts)
				}
				if tc.reason != nil && !errors.Is(err, tc.reason) {
					t.Fatalf("err %v, want reason %v", err, tc.reason)
				}
			})
		})
	}
}
