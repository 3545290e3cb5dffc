package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/internal/observe/observetest"
	"github.com/rebound-go/rebound/serviceconfig"
)

var resolverSchemes atomic.Int64

// configResolver returns a manual resolver of a scheme of its own that,
// once built, points at srv with the service config js ("" for none).
func configResolver(srv *grpctest.Server, js string) *manual.Resolver {
	r := manual.NewBuilderWithScheme(fmt.Sprint("rebound-sc-", resolverSchemes.Add(1)))
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		st := resolver.State{Addresses: []resolver.Address{{Addr: srv.Addr}}}
		if js != "" {
			st.ServiceConfig = cc.ParseServiceConfig(js)
		}
		r.InitialState(st)
	}
	return r
}

// push has r deliver the service config js to the conns it resolves.
func push(r *manual.Resolver, srv *grpctest.Server, js string) {
	r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: srv.Addr}}, ServiceConfig: r.CC().ParseServiceConfig(js)})
}

// policyJSON is a service config retrying UNAVAILABLE up to maxAttempts
// times on the test service, with extra top-level fields.
func policyJSON(maxAttempts int, extra string) string {
	return fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":%d,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
		"retryableStatusCodes":["UNAVAILABLE"]}}]%s}`, grpctest.Service, maxAttempts, extra)
}

// dialResolved dials r's target through a Client of cfg that takes r's
// configs.
func dialResolved(t *testing.T, r *manual.Resolver, cfg *serviceconfig.Config, opts []grpcretry.Option, dial ...grpc.DialOption) (testpb.TestServiceClient, *grpcretry.Client) {
	t.Helper()
	c, err := grpcretry.New(cfg, append([]grpcretry.Option{grpcretry.WithResolver(r), grpcretry.WithClock(clocktest.NewAuto())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(r.Scheme()+":///svc", append(append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials())), dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc), c
}

// attempts makes a call that the server fails with UNAVAILABLE and
// returns how many attempts rebound made.
func attempts(t *testing.T, tc testpb.TestServiceClient) int {
	t.Helper()
	var n int
	_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("call: %v, want UNAVAILABLE", err)
	}
	return n
}

// The resolver's config replaces the one given in code, from the first
// call on; each valid update applies to the calls after it; an invalid
// one (for rebound or for grpc-go) changes nothing, and is counted and
// logged; a resolver update without a config keeps the one in force.
func TestResolverConfig(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1<<30, codes.Unavailable))
	r := configResolver(srv, policyJSON(3, ""))
	logger, records := observetest.DebugLog(t)
	tc, c := dialResolved(t, r, retryConfig(t, 2, `"UNAVAILABLE"`, ""), []grpcretry.Option{grpcretry.WithLogger(logger)})

	if n := attempts(t, tc); n != 3 {
		t.Fatalf("first call: %d attempts, want the resolver's 3", n)
	}
	push(r, srv, policyJSON(4, ""))
	if n := attempts(t, tc); n != 4 {
		t.Fatalf("after the update: %d attempts, want 4", n)
	}
	for i, bad := range []string{
		policyJSON(1, ""), // maxAttempts must be > 1 (A6)
		`{"methodConfig":[`,
		policyJSON(5, `,"loadBalancingConfig":[{"no_such_policy":{}}]`), // grpc-go rejects it
	} {
		push(r, srv, bad)
		if got := c.ResolverConfigErrors(); got != uint64(i+1) {
			t.Fatalf("bad config %d: %d errors counted, want %d", i, got, i+1)
		}
		if n := attempts(t, tc); n != 4 {
			t.Fatalf("after bad config %d: %d attempts, want the last good 4", i, n)
		}
	}
	warned := 0
	for _, rec := range records() {
		if rec["level"] == "WARN" && rec["msg"] == "grpcretry: rejected the service config from the name resolver; the last good config stays in force" && rec["error"] != "" {
			warned++
		}
	}
	if warned != 3 {
		t.Fatalf("%d warnings logged, want 3: %v", warned, records())
	}
	r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: srv.Addr}}})
	if n := attempts(t, tc); n != 4 {
		t.Fatalf("after an update without a config: %d attempts, want 4", n)
	}
	// A record written for grpc-go's own retries, in its spellings.
	push(r, srv, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"waitForReady":true,"retryPolicy":{
		"MaxAttempts":5,"InitialBackoff":".01s","MaxBackoff":".01s","BackoffMultiplier":1.0,
		"RetryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service))
	if n := attempts(t, tc); n != 5 || c.ResolverConfigErrors() != 3 {
		t.Fatalf("grpc-go's spellings: %d attempts, %d errors; want 5, still 3", n, c.ResolverConfigErrors())
	}
}

// grpc.WithDisableServiceConfig keeps the config given in code.
func TestResolverConfigDisabled(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1<<30, codes.Unavailable))
	r := configResolver(srv, policyJSON(4, ""))
	tc, c := dialResolved(t, r, retryConfig(t, 2, `"UNAVAILABLE"`, ""), nil, grpc.WithDisableServiceConfig())
	if n := attempts(t, tc); n != 2 {
		t.Fatalf("%d attempts, want the code's 2", n)
	}
	push(r, srv, policyJSON(5, ""))
	if n := attempts(t, tc); n != 2 || c.ResolverConfigErrors() != 0 {
		t.Fatalf("after an update: %d attempts, %d errors; want the code's 2, none", n, c.ResolverConfigErrors())
	}
}

// A call keeps the policy it started under when the resolver delivers a
// new config while it runs.
func TestResolverConfigInFlight(t *testing.T) {
	release := make(chan struct{})
	var first atomic.Bool
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if first.CompareAndSwap(false, true) {
			<-release
		}
		return nil, status.Error(codes.Unavailable, "down")
	}})
	r := configResolver(srv, policyJSON(2, ""))
	tc, _ := dialResolved(t, r, nil, nil)
	done := make(chan int, 1)
	go func() { done <- attempts(t, tc) }()
	waitFor(t, func() bool { return srv.Count(grpctest.UnaryCall) == 1 })
	push(r, srv, policyJSON(5, ""))
	close(release)
	if n := <-done; n != 2 {
		t.Fatalf("the call in flight made %d attempts, want the 2 of its start", n)
	}
	if n := attempts(t, tc); n != 5 {
		t.Fatalf("the next call made %d attempts, want 5", n)
	}
}

// The throttle of the server name stays the same across updates that keep
// its retryThrottling settings, and is new when they change.
func TestResolverConfigKeepsThrottle(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1<<30, codes.Unavailable))
	throttling := func(maxTokens int) string {
		return fmt.Sprintf(`,"retryThrottling":{"maxTokens":%d,"tokenRatio":0.1}`, maxTokens)
	}
	r := configResolver(srv, policyJSON(3, throttling(10)))
	tc, _ := dialResolved(t, r, nil, []grpcretry.Option{grpcretry.WithServerName(fmt.Sprint(t.Name(), "-", resolverSchemes.Add(1)))})
	// 10 tokens, each failure takes one, and retries stop at 5 or less.
	for i, want := range []int{3, 2, 1} {
		if n := attempts(t, tc); n != want {
			t.Fatalf("call %d: %d attempts, want %d", i, n, want)
		}
	}
	push(r, srv, policyJSON(4, throttling(10)))
	if n := attempts(t, tc); n != 1 {
		t.Fatalf("same throttling, new policy: %d attempts, want 1 (the throttle is still drained)", n)
	}
	push(r, srv, policyJSON(4, throttling(20)))
	if n := attempts(t, tc); n != 4 {
		t.Fatalf("new throttling: %d attempts, want 4 (a full throttle)", n)
	}
}

// On an xds target grpc-go applies the routes' retry policies (gRFC A44)
// itself, below rebound, which neither sees nor turns them off. No xDS
// server runs here: a manual resolver of the xds scheme stands in for
// grpc-go's xds resolver, delivering a service config with a retryPolicy,
// which is where grpc-go takes its retry policy from on any target.
func TestXDSTargetKeepsGRPCRetries(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
	r := manual.NewBuilderWithScheme("xds")
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: srv.Addr}}, ServiceConfig: cc.ParseServiceConfig(policyJSON(3, ""))})
	}
	c, err := grpcretry.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///svc", append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var n int
	if _, err := testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n)); err != nil {
		t.Fatal(err)
	}
	if got := srv.Count(grpctest.UnaryCall); n != 1 || got != 2 {
		t.Fatalf("rebound made %d attempts and the server saw %d; want 1 and 2 (grpc-go retried)", n, got)
	}
}

// A Client installed by hand, without DialOptions, never waits for a
// resolver and applies its own config.
func TestResolverNotWrappedByHand(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1<<30, codes.Unavailable))
	r := configResolver(srv, policyJSON(4, ""))
	c, err := grpcretry.New(retryConfig(t, 2, `"UNAVAILABLE"`, ""), grpcretry.WithResolver(r), grpcretry.WithClock(clocktest.NewAuto()))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(r.Scheme()+":///svc", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithResolvers(r), grpc.WithUnaryInterceptor(c.UnaryClientInterceptor()), grpc.WithDisableRetry())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var n int
	_, err = testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
	if !errors.Is(err, rebound.ErrAttemptsExhausted) || n != 2 {
		t.Fatalf("%v after %d attempts; want attempts exhausted after the code's 2", err, n)
	}
}

func TestWithResolverNil(t *testing.T) {
	if _, err := grpcretry.New(nil, grpcretry.WithResolver(nil)); err == nil {
		t.Fatal("WithResolver(nil) accepted")
	}
}

// staticBuilder resolves every target of its scheme to addr with the
// service config js, and keeps nothing of the conns it resolves for.
type staticBuilder struct{ scheme, addr, js string }

func (b staticBuilder) Scheme() string { return b.scheme }

func (b staticBuilder) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	err := cc.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: b.addr}}, ServiceConfig: cc.ParseServiceConfig(b.js)})
	return staticResolver{}, err
}

type staticResolver struct{}

func (staticResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (staticResolver) Close()                                {}

// A Client whose conns take their resolvers' configs keeps nothing of a
// conn once it is closed and dropped: neither its retry state nor its
// resolver's config (issue 13).
func TestResolvedConfigsReleased(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{})
	b := staticBuilder{scheme: fmt.Sprint("rebound-static-", resolverSchemes.Add(1)), addr: srv.Addr, js: policyJSON(3, "")}
	c, err := grpcretry.New(nil, grpcretry.WithResolver(b))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		cc, err := grpc.NewClient(fmt.Sprintf("%s:///svc-%d", b.scheme, i), append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
			t.Fatal(err)
		}
		cc.Close()
	}
	if n := grpcretry.Resolved(c); n == 0 {
		t.Fatal("no resolver config kept while the conns were in use")
	}
	settle(t, func() bool { return grpcretry.Targets(c) == 0 && grpcretry.Resolved(c) == 0 })
}

// A config the resolver delivers and rebound rejects leaves grpc-go's part
// of the last good one in force too: grpc-go is handed the state without a
// config, and keeps the loadBalancingConfig it had (round_robin) rather
// than taking the rejected config's (pick_first) or its default.
func TestResolverRejectedConfigKeepsBalancer(t *testing.T) {
	ok := grpctest.Handlers{Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		return &testpb.SimpleResponse{}, nil
	}}
	a, b := grpctest.Start(t, ok), grpctest.Start(t, ok)
	addrs := []resolver.Address{{Addr: a.Addr}, {Addr: b.Addr}}
	roundRobin := policyJSON(3, `,"loadBalancingConfig":[{"round_robin":{}}]`)
	r := manual.NewBuilderWithScheme(fmt.Sprint("rebound-sc-", resolverSchemes.Add(1)))
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		r.InitialState(resolver.State{Addresses: addrs, ServiceConfig: cc.ParseServiceConfig(roundRobin)})
	}
	tc, c := dialResolved(t, r, nil, []grpcretry.Option{grpcretry.WithLogger(slog.New(slog.DiscardHandler))})
	call := func() {
		t.Helper()
		if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
			t.Fatal(err)
		}
	}
	// round_robin reaches both backends once both are ready.
	waitFor(t, func() bool { call(); return a.Count(grpctest.UnaryCall) > 0 && b.Count(grpctest.UnaryCall) > 0 })
	r.UpdateState(resolver.State{Addresses: addrs, ServiceConfig: r.CC().ParseServiceConfig(policyJSON(1, `,"loadBalancingConfig":[{"pick_first":{}}]`))})
	if c.ResolverConfigErrors() != 1 {
		t.Fatalf("%d configs rejected, want 1", c.ResolverConfigErrors())
	}
	for range 20 { // time for a balancer switch, were there one
		call()
	}
	na, nb := a.Count(grpctest.UnaryCall), b.Count(grpctest.UnaryCall)
	for range 20 {
		call()
	}
	if da, db := a.Count(grpctest.UnaryCall)-na, b.Count(grpctest.UnaryCall)-nb; da != 10 || db != 10 {
		t.Fatalf("after the rejected config, 20 calls went %d and %d to the backends, want 10 and 10 (round_robin kept)", da, db)
	}
}
