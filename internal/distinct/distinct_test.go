package distinct_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/distinct"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/internal/testmain"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func lbConfig(child string) grpc.DialOption {
	return grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig":[{%q:{"childPolicy":[{%q:{}}]}}]}`, distinct.Name, child))
}

// warmUp makes untracked calls until every server of c has answered one,
// so that the child policy is connected to all of them.
func warmUp(t *testing.T, c *grpctest.Cluster, tc testpb.TestServiceClient) {
	t.Helper()
	// The child policy picks only the backends whose connections are
	// ready, and on a loaded machine the last one may take a while.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		all := true
		for _, s := range c.Servers {
			all = all && s.Count(grpctest.UnaryCall) > 0
		}
		if all {
			return
		}
		_, _ = tc.UnaryCall(context.Background(), grpctest.Request("warm-up"), grpc.WaitForReady(true))
	}
	t.Fatal("not every backend answered")
}

// backends returns, for each payload, the indexes of the servers that saw
// it, in no particular order.
func backends(c *grpctest.Cluster) map[string][]int {
	m := map[string][]int{}
	for i, s := range c.Servers {
		for _, a := range s.Attempts(grpctest.UnaryCall) {
			m[a.Payload] = append(m[a.Payload], i)
		}
	}
	return m
}

func TestParseConfig(t *testing.T) {
	p := balancer.Get(distinct.Name).(balancer.ConfigParser)
	for _, tc := range []struct {
		js, err string
	}{
		{`{}`, ""},
		{`{"childPolicy":[{"round_robin":{}}]}`, ""},
		{`{"childPolicy":[{"no_such_policy":{}},{"pick_first":{}}]}`, ""},
		{`{"unknownField":1}`, ""},
		{`{"childPolicy":[]}`, "no registered policy"},
		{`{"childPolicy":[{"no_such_policy":{}}]}`, `no registered policy among ["no_such_policy"]`},
		{`{"childPolicy":[{"rebound_distinct":{}}]}`, "cannot be its own child"},
		{`{"childPolicy":[{"round_robin":{},"pick_first":{}}]}`, "childPolicy[0]: want exactly one policy name, got 2"},
		{`{"childPolicy":[{"pick_first":{"shuffleAddressList":"yes"}}]}`, "childPolicy[0].pick_first"},
		{`[1]`, "distinct:"},
	} {
		_, err := p.ParseConfig([]byte(tc.js))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.js, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one containing %q", tc.js, err, tc.err)
		}
	}
}

// TestPicksUnusedBackend drives round_robin into choosing, for a tracked
// call, a backend the call already used: untracked calls in between move
// it back round. The policy must pick the unused backends instead, and
// fall back to the child's choice once all three are used.
func TestPicksUnusedBackend(t *testing.T) {
	c := grpctest.StartCluster(t, 3, grpctest.Handlers{})
	tc := testpb.NewTestServiceClient(c.Dial(t, lbConfig("round_robin")))
	warmUp(t, c, tc)

	call := new(distinct.Call)
	ctx := distinct.NewContext(context.Background(), call)
	for i := range 4 {
		if _, err := tc.UnaryCall(ctx, grpctest.Request(fmt.Sprint("tracked-", i))); err != nil {
			t.Fatal(err)
		}
		// A full round of round_robin: left alone, it would pick the
		// same backend for the next tracked call.
		for range 2 {
			if _, err := tc.UnaryCall(context.Background(), grpctest.Request("other")); err != nil {
				t.Fatal(err)
			}
		}
	}
	addrs := call.Addresses()
	if len(addrs) != 4 {
		t.Fatalf("recorded %v, want 4 addresses", addrs)
	}
	seen := map[int]bool{}
	for i, a := range addrs[:3] {
		idx := c.Index(a)
		if idx < 0 || seen[idx] {
			t.Fatalf("pick %d went to %s; picks %v are not 3 distinct backends", i+1, a, addrs)
		}
		seen[idx] = true
	}
	if c.Index(addrs[3]) < 0 {
		t.Fatalf("the 4th pick went to %q, not a backend", addrs[3])
	}
	// The servers agree with the record.
	b := backends(c)
	for i, a := range addrs {
		if got := b[fmt.Sprint("tracked-", i)]; !slices.Equal(got, []int{c.Index(a)}) {
			t.Fatalf("tracked call %d served by %v, recorded at %s", i, got, a)
		}
	}
}

// TestChildChoiceWhenNoOtherBackend: pick_first hands out one backend only,
// so every pick of a tracked call stays on it.
func TestChildChoiceWhenNoOtherBackend(t *testing.T) {
	c := grpctest.StartCluster(t, 3, grpctest.Handlers{})
	tc := testpb.NewTestServiceClient(c.Dial(t, lbConfig("pick_first")))
	call := new(distinct.Call)
	ctx := distinct.NewContext(context.Background(), call)
	for range 3 {
		if _, err := tc.UnaryCall(ctx, grpctest.Request("x")); err != nil {
			t.Fatal(err)
		}
	}
	addrs := call.Addresses()
	if len(addrs) != 3 || addrs[0] != addrs[1] || addrs[1] != addrs[2] {
		t.Fatalf("picks %v, want pick_first's one backend three times", addrs)
	}
}

func TestNoCallInContext(t *testing.T) {
	if distinct.FromContext(context.Background()) != nil {
		t.Fatal("a Call in an empty context")
	}
	ctx := distinct.NewContext(context.Background(), nil)
	if distinct.FromContext(ctx) != nil {
		t.Fatal("NewContext stored a nil Call")
	}
	if new(distinct.Call).Addresses() != nil {
		t.Fatal("a new Call has addresses")
	}
}

// A Context's Call is made at its first use, once, however many hedges
// look for it at the same time, and the Context keeps the embedded
// context's values.
func TestContextMakesOneCall(t *testing.T) {
	type key struct{}
	var dctx distinct.Context
	dctx.Context = context.WithValue(context.Background(), key{}, "v")
	ctx := context.WithValue(&dctx, key{}, "outer") // as an attempt's context wraps it
	const n = 8
	calls := make([]*distinct.Call, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { calls[i] = distinct.FromContext(ctx) })
	}
	wg.Wait()
	for i, c := range calls {
		if c == nil || c != calls[0] {
			t.Fatalf("FromContext %d returned %p, want one non-nil Call (%p)", i, c, calls[0])
		}
	}
	if c := dctx.Call(); c != calls[0] {
		t.Fatalf("Context.Call() = %p, want the Call of FromContext, %p", c, calls[0])
	}
	if got := dctx.Value(key{}); got != "v" {
		t.Fatalf("embedded value = %v, want v", got)
	}
}

// TestHedgesOnDistinctBackendsUnderLoad runs hedged calls from many
// goroutines through grpcretry against three backends. Every attempt
// fails with a non-fatal code, so that each call sends and the servers see
// all three attempts; each call's three must land on three backends.
func TestHedgesOnDistinctBackendsUnderLoad(t *testing.T) {
	const workers, callsEach = 8, 25
	unavailable := grpctest.Handlers{Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		return nil, status.Error(codes.Unavailable, "busy")
	}}
	cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":%q}],
		"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0s","nonFatalStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service))
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{distinct.Name, "round_robin"} {
		t.Run(policy, func(t *testing.T) {
			c := grpctest.StartCluster(t, 3, grpctest.Handlers{})
			var lb grpc.DialOption
			if policy == distinct.Name {
				lb = lbConfig("round_robin")
			} else {
				lb = grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)
			}
			rc, err := grpcretry.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			tc := testpb.NewTestServiceClient(c.Dial(t, append(rc.DialOptions(), lb)...))
			warmUp(t, c, tc)
			c.SetHandlers(unavailable)

			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range callsEach {
						var n int
						_, err := tc.UnaryCall(context.Background(), grpctest.Request(fmt.Sprintf("call-%d-%d", w, i)), grpcretry.CountAttempts(&n))
						if status.Code(err) != codes.Unavailable || n != 3 {
							t.Errorf("call %d-%d: %v after %d attempts, want UNAVAILABLE after 3", w, i, err, n)
						}
					}
				})
			}
			wg.Wait()
			shared := 0
			for id, b := range backends(c) {
				if !strings.HasPrefix(id, "call-") {
					continue
				}
				if len(b) != 3 {
					t.Fatalf("%s: servers saw %d attempts, want 3", id, len(b))
				}
				slices.Sort(b)
				if len(slices.Compact(b)) != 3 {
					shared++
				}
			}
			if policy == distinct.Name && shared != 0 {
				t.Fatalf("%d of %d calls sent two attempts to one backend", shared, workers*callsEach)
			}
			t.Logf("%s: %d of %d calls sent two attempts to one backend", policy, shared, workers*callsEach)
		})
	}
}

// TestRetriesOnDistinctBackends: under rebound_distinct, each retry of a
// call goes to a backend the call has not used, for unary calls and
// streams alike: with three failing backends and three attempts, each call
// reaches all three. Calls run from many goroutines at once, so that
// round_robin alone would often send two attempts of a call to one
// backend.
func TestRetriesOnDistinctBackends(t *testing.T) {
	const workers, callsEach = 8, 10
	cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":%q}],
		"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.01s","backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service))
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{distinct.Name, "round_robin"} {
		t.Run(policy, func(t *testing.T) {
			c := grpctest.StartCluster(t, 3, grpctest.Handlers{})
			lb := lbConfig("round_robin")
			if policy != distinct.Name {
				lb = grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)
			}
			rc, err := grpcretry.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			tc := testpb.NewTestServiceClient(c.Dial(t, append(rc.DialOptions(), lb)...))
			warmUp(t, c, tc)
			if policy == distinct.Name && !distinct.InUse() {
				t.Fatal("a conn has picked under the policy, and InUse is false: grpcretry would leave the record out")
			}
			c.SetHandlers(grpctest.Handlers{
				Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
					return nil, status.Error(codes.Unavailable, "busy")
				},
				ServerStream: func(int, *testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
					return status.Error(codes.Unavailable, "busy")
				},
			})
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range callsEach {
						id := fmt.Sprintf("call-%d-%d", w, i)
						var n int
						_, err := tc.UnaryCall(context.Background(), grpctest.Request(id), grpcretry.CountAttempts(&n))
						if status.Code(err) != codes.Unavailable || n != 3 {
							t.Errorf("unary %s: %v after %d attempts, want UNAVAILABLE after 3", id, err, n)
						}
						st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(id)}})
						if err == nil {
							_, err = st.Recv()
						}
						if status.Code(err) != codes.Unavailable {
							t.Errorf("stream %s: %v, want UNAVAILABLE", id, err)
						}
					}
				})
			}
			wg.Wait()
			for _, method := range []string{grpctest.UnaryCall, grpctest.StreamingOutputCall} {
				seen := map[string][]int{}
				for i, s := range c.Servers {
					for _, a := range s.Attempts(method) {
						seen[a.Payload] = append(seen[a.Payload], i)
					}
				}
				shared := 0
				for id, b := range seen {
					if !strings.HasPrefix(id, "call-") {
						continue
					}
					if len(b) != 3 {
						t.Fatalf("%s %s: servers saw %d attempts, want 3", method, id, len(b))
					}
					slices.Sort(b)
					if len(slices.Compact(b)) != 3 {
						shared++
					}
				}
				if policy == distinct.Name && shared != 0 {
					t.Fatalf("%s: %d of %d calls sent two attempts to one backend", method, shared, workers*callsEach)
				}
				t.Logf("%s %s: %d of %d calls sent two attempts to one backend", policy, method, shared, workers*callsEach)
			}
		})
	}
}
