package connectretry_test

import (
	"context"
	"errors"
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
					if f.Procedure != unary {
						t.Errorf("procedure %q", f.Procedure)
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
