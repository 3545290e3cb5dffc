package grpcretry_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// The one-liner applies the config's loadBalancingConfig: the
// rebound_distinct policy it names sends a hedged call's two attempts to
// the two backends, where grpc-go's default, pick_first, would send both to
// the first. The config's lower-case code, which grpc-go's own parser
// rejects, stays with rebound.
func TestDialOptionsAppliesLoadBalancingConfig(t *testing.T) {
	cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{
	  "loadBalancingConfig": [{"rebound_distinct": {"childPolicy": [{"round_robin": {}}]}}],
	  "methodConfig": [{
	    "name": [{"service": %q}],
	    "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0s", "nonFatalStatusCodes": ["unavailable"]}
	  }]
	}`, grpctest.Service))
	if err != nil {
		t.Fatal(err)
	}
	c := grpctest.StartCluster(t, 2, grpctest.Handlers{})
	tc := testpb.NewTestServiceClient(c.Dial(t, grpcretry.DialOptions(cfg)...))

	// round_robin hands out only the backends it is connected to: wait
	// until both have answered a call.
	for deadline := time.Now().Add(10 * time.Second); c.Servers[0].Count(grpctest.UnaryCall) == 0 || c.Servers[1].Count(grpctest.UnaryCall) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("not every backend answered: the loadBalancingConfig was not applied")
		}
		_, _ = tc.UnaryCall(context.Background(), grpctest.Request("warm-up"), grpc.WaitForReady(true))
	}

	c.SetHandlers(grpctest.Handlers{Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		return nil, status.Error(codes.Unavailable, "busy")
	}})
	var attempts int
	_, err = tc.UnaryCall(context.Background(), grpctest.Request("hedged"), grpcretry.CountAttempts(&attempts))
	if status.Code(err) != codes.Unavailable || attempts != 2 {
		t.Fatalf("call = %v after %d attempts, want UNAVAILABLE after 2", err, attempts)
	}
	var served []int
	for i, s := range c.Servers {
		for _, a := range s.Attempts(grpctest.UnaryCall) {
			if a.Payload == "hedged" {
				served = append(served, i)
			}
		}
	}
	if !slices.Equal(served, []int{0, 1}) {
		t.Fatalf("the hedged call's attempts were served by backends %v, want [0 1]", served)
	}
}

// A load-balancing policy grpc-go does not know fails grpc.NewClient, with
// an error naming it, before any call is made.
func TestDialOptionsRejectsUnknownBalancer(t *testing.T) {
	cfg, err := serviceconfig.Parse([]byte(`{"loadBalancingConfig": [{"no_such_policy": {}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("passthrough:///127.0.0.1:1", append(grpcretry.DialOptions(cfg),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err == nil {
		cc.Close()
		t.Fatal("grpc.NewClient accepted an unknown load-balancing policy")
	}
	if !strings.Contains(err.Error(), "no_such_policy") {
		t.Fatalf("grpc.NewClient: %v; want an error naming no_such_policy", err)
	}
}

// A config without gRPC fields adds no default service config, so that one
// the application passes is not replaced.
func TestDialOptionsWithoutGRPCFields(t *testing.T) {
	c, err := grpcretry.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	withLB, err := grpcretry.New(&serviceconfig.Config{LoadBalancingPolicy: "round_robin"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(withLB.DialOptions()), len(c.DialOptions())+1; got != want {
		t.Fatalf("DialOptions with loadBalancingPolicy has %d options, want %d", got, want)
	}
}
