package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
)

func TestClassifier(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     connect.Code
		meta     string // x-retry: the server's hint to the classifier
		attempts int
		reason   error
	}{
		{"promotes a code the policy does not list", connect.CodeInternal, "yes", 3, rebound.ErrAttemptsExhausted},
		{"demotes a listed code", connect.CodeUnavailable, "no", 1, rebound.ErrNotRetryable},
		{"leaves the rest", connect.CodeUnavailable, "", 3, rebound.ErrAttemptsExhausted},
	} {
		for _, p := range protocols {
			t.Run(tc.name+"/"+p.name, func(t *testing.T) {
				s := startServer(t, handlers{unary: func(_ context.Context, n int, req *request) (*connect.Response[msg], error) {
					e := connect.NewError(tc.code, errors.New("fails"))
					e.Meta().Set("x-retry", tc.meta)
					return nil, e
				}}, p.http2)
				c, _ := dial(t, s, p, retryConfig(t, 3, `"UNAVAILABLE"`, ""), connectretry.WithClassifier(func(f connectretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
					if f.Method != unary {
						t.Errorf("method %q", f.Method)
					}
					switch f.Err.Meta().Get("x-retry") {
					case "yes":
						v.Safety = rebound.SafetyYes
					case "no":
						v.Safety = rebound.SafetyNo
					}
					return v
				}))
				_, err := call(context.Background(), c.unary, "x")
				if got := s.count(unary); got != tc.attempts || !errors.Is(err, tc.reason) || connect.CodeOf(err) != tc.code {
					t.Fatalf("%d attempts, err %v; want %d, reason %v", got, err, tc.attempts, tc.reason)
				}
			})
		}
	}
}

// TestClassifierGuardrails: the classifier cannot undo the server's
// pushback "stop", cannot start retries for a procedure no policy governs
// (it is not even asked), and a class it names has its own attempt limit,
// as in grpcretry and httpretry.
func TestClassifierGuardrails(t *testing.T) {
	retryAll := func(_ connectretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
		v.Safety = rebound.SafetyYes
		v.Committed, v.ServerStop = false, false // attempts to undo: ignored
		return v
	}
	for _, tc := range []struct {
		name     string
		cfg      string // the service the policy names
		pushback string
		classify func(connectretry.Failure, rebound.RetryInfo) rebound.RetryInfo
		attempts int
		reason   error
	}{
		{"cannot undo pushback stop", service, "-1", retryAll, 1, rebound.ErrPushback},
		{"cannot promote without a policy", "other.Service", "", func(f connectretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
			t.Errorf("classifier asked about %s, which no policy governs", f.Method)
			return retryAll(f, v)
		}, 1, nil},
		{"a class with its own limit", service, "", func(_ connectretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
			v.Class, v.ClassAttempts = "busy", 2
			return v
		}, 2, rebound.ErrAttemptsExhausted},
	} {
		for _, p := range protocols {
			t.Run(tc.name+"/"+p.name, func(t *testing.T) {
				s := startServer(t, handlers{unary: func(context.Context, int, *request) (*connect.Response[msg], error) {
					e := connect.NewError(connect.CodeUnavailable, errors.New("fails"))
					if tc.pushback != "" {
						e.Meta().Set("grpc-retry-pushback-ms", tc.pushback)
					}
					return nil, e
				}}, p.http2)
				cfg := parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
					"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
					"retryableStatusCodes":["UNAVAILABLE"]}}]}`, tc.cfg))
				c, _ := dial(t, s, p, cfg, connectretry.WithClassifier(tc.classify))
				_, err := call(context.Background(), c.unary, "x")
				if got := s.count(unary); got != tc.attempts || connect.CodeOf(err) != connect.CodeUnavailable {
					t.Fatalf("%d attempts, err %v; want %d, UNAVAILABLE", got, err, tc.attempts)
				}
				if tc.reason != nil && !errors.Is(err, tc.reason) {
					t.Fatalf("err %v, want reason %v", err, tc.reason)
				}
			})
		}
	}
}
