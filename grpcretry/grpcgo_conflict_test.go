package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// nativeRetryJSON is a service config as a user of grpc-go's own retries
// writes it: three attempts on UNAVAILABLE, with backoffs short enough
// for a test (grpc-go waits on real time).
var nativeRetryJSON = fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
	"maxAttempts":3,"initialBackoff":"0.001s","maxBackoff":"0.001s","backoffMultiplier":1,
	"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service)

// alwaysUnavailable fails every unary call and server stream UNAVAILABLE.
var alwaysUnavailable = grpctest.Handlers{
	Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		return nil, status.Error(codes.Unavailable, "down")
	},
	ServerStream: func(int, *testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		return status.Error(codes.Unavailable, "down")
	},
}

// conflictDial dials srv with rebound's options for cfg and
// grpc.WithDefaultServiceConfig(js), rebound's first unless grpcFirst.
func conflictDial(t *testing.T, srv *grpctest.Server, target string, cfg *serviceconfig.Config, js string, grpcFirst bool) testpb.TestServiceClient {
	t.Helper()
	reb := grpcretry.DialOptions(cfg, grpcretry.WithClock(clocktest.NewAuto()))
	opts := append(reb, grpc.WithDefaultServiceConfig(js))
	if grpcFirst {
		opts = append([]grpc.DialOption{grpc.WithDefaultServiceConfig(js)}, reb...)
	}
	if target == "" {
		return testpb.NewTestServiceClient(srv.Dial(t, opts...))
	}
	cc, err := grpc.NewClient(target, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// isConflict reports whether err is the error of a call whose method
// grpc-go retries too: codes.Internal, naming the conflict and the fix.
func isConflict(err error) bool {
	msg := status.Convert(err).Message()
	return status.Code(err) == codes.Internal && strings.Contains(msg, "grpc-go also has a retryPolicy") &&
		strings.Contains(msg, "grpc.WithDefaultServiceConfig") && strings.Contains(msg, "grpcretry.WithResolver")
}

// TestGRPCGoRetryPolicyConflict: a retryPolicy given to grpc-go with
// grpc.WithDefaultServiceConfig, for a method rebound retries too, would
// have grpc-go retry each of rebound's attempts: 9 attempts where 3 are
// configured. With the options in either order, calls fail instead,
// before any attempt, with an error that names the conflict and the fix;
// the fix (the retryPolicy left out of grpc-go's config) makes 3.
func TestGRPCGoRetryPolicyConflict(t *testing.T) {
	cfg, err := serviceconfig.Parse([]byte(nativeRetryJSON))
	if err != nil {
		t.Fatal(err)
	}
	for _, grpcFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("grpc-go's option first=%v", grpcFirst), func(t *testing.T) {
			srv := grpctest.Start(t, alwaysUnavailable)
			tc := conflictDial(t, srv, "", cfg, nativeRetryJSON, grpcFirst)
			for call := 1; call <= 2; call++ {
				_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"))
				if !isConflict(err) {
					t.Fatalf("call %d: %v (server saw %d attempts), want the conflict named", call, err, srv.Count(grpctest.UnaryCall))
				}
			}
			st, err := tc.StreamingOutputCall(context.Background(), outMsg("x"))
			if err == nil {
				_, err = st.Recv()
			}
			if !isConflict(err) {
				t.Fatalf("server stream: %v, want the conflict named", err)
			}
			if u, s := srv.Count(grpctest.UnaryCall), srv.Count(grpctest.StreamingOutputCall); u != 0 || s != 0 {
				t.Fatalf("server saw %d unary and %d stream attempts, want none", u, s)
			}

			// The fix: grpc-go's config without the retryPolicy.
			srv = grpctest.Start(t, alwaysUnavailable)
			tc = conflictDial(t, srv, "", cfg, `{"loadBalancingConfig":[{"pick_first":{}}]}`, grpcFirst)
			_, err = tc.UnaryCall(context.Background(), grpctest.Request("x"))
			if status.Code(err) != codes.Unavailable || !errors.Is(err, rebound.ErrAttemptsExhausted) {
				t.Fatalf("after the fix: %v, want UNAVAILABLE, attempts exhausted", err)
			}
			if got := srv.Count(grpctest.UnaryCall); got != 3 {
				t.Fatalf("after the fix the server saw %d attempts, want 3", got)
			}
		})
	}
}

// TestGRPCGoRetryPolicyConflictHedging: hedges that grpc-go would retry
// multiply too.
func TestGRPCGoRetryPolicyConflictHedging(t *testing.T) {
	srv := grpctest.Start(t, alwaysUnavailable)
	tc := conflictDial(t, srv, "", hedgeConfig(t, 3, "0s", ""), nativeRetryJSON, false)
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); !isConflict(err) {
		t.Fatalf("%v (server saw %d attempts), want the conflict named", err, srv.Count(grpctest.UnaryCall))
	}
	if got := srv.Count(grpctest.UnaryCall); got != 0 {
		t.Fatalf("server saw %d attempts, want none", got)
	}
}

// TestGRPCGoRetryPolicyAlone: a method that rebound has no policy for is
// grpc-go's to retry: no conflict, grpc-go's three attempts.
func TestGRPCGoRetryPolicyAlone(t *testing.T) {
	srv := grpctest.Start(t, alwaysUnavailable)
	cfg, err := serviceconfig.Parse([]byte(`{"methodConfig":[{"name":[{"service":"other.Service"}],"retryPolicy":{
		"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tc := conflictDial(t, srv, "", cfg, nativeRetryJSON, false)
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); status.Code(err) != codes.Unavailable {
		t.Fatalf("%v, want UNAVAILABLE", err)
	}
	if got := srv.Count(grpctest.UnaryCall); got != 3 {
		t.Fatalf("server saw %d attempts, want grpc-go's 3", got)
	}
}

// TestGRPCGoRetryPolicyConflictUnwrappedResolver: on a target whose
// resolver rebound does not wrap (passthrough), the first call still
// waits for grpc-go's config, and fails before any attempt.
func TestGRPCGoRetryPolicyConflictUnwrappedResolver(t *testing.T) {
	cfg, err := serviceconfig.Parse([]byte(nativeRetryJSON))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpctest.Start(t, alwaysUnavailable)
	tc := conflictDial(t, srv, "passthrough:///"+srv.Addr, cfg, nativeRetryJSON, false)
	for call := 1; call <= 2; call++ {
		if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); !isConflict(err) {
			t.Fatalf("call %d: %v (server saw %d attempts), want the conflict named", call, err, srv.Count(grpctest.UnaryCall))
		}
	}
	if got := srv.Count(grpctest.UnaryCall); got != 0 {
		t.Fatalf("server saw %d attempts, want none", got)
	}
}

// TestGRPCGoRetryPolicyRetriesDisabled: on a conn made with
// grpc.WithDisableRetry grpc-go retries nothing, whatever its config says:
// no conflict, rebound's 3 attempts. It also pins how rebound learns of
// the option (grpc-go has no accessor for it).
func TestGRPCGoRetryPolicyRetriesDisabled(t *testing.T) {
	cfg, err := serviceconfig.Parse([]byte(nativeRetryJSON))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpctest.Start(t, alwaysUnavailable)
	tc := testpb.NewTestServiceClient(srv.Dial(t, append(grpcretry.DialOptions(cfg, grpcretry.WithClock(clocktest.NewAuto())),
		grpc.WithDefaultServiceConfig(nativeRetryJSON), grpc.WithDisableRetry())...))
	_, err = tc.UnaryCall(context.Background(), grpctest.Request("x"))
	if status.Code(err) != codes.Unavailable || !errors.Is(err, rebound.ErrAttemptsExhausted) {
		t.Fatalf("%v, want UNAVAILABLE, attempts exhausted", err)
	}
	if got := srv.Count(grpctest.UnaryCall); got != 3 {
		t.Fatalf("server saw %d attempts, want rebound's 3", got)
	}
}
