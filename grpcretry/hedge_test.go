package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/internal/stretch"
	"github.com/rebound-go/rebound/serviceconfig"
)

// hedgeConfig is a service config with a hedging policy on the test
// service; delay "" leaves hedgingDelay out.
func hedgeConfig(t testing.TB, maxAttempts int, delay, extra string) *serviceconfig.Config {
	t.Helper()
	d := ""
	if delay != "" {
		d = fmt.Sprintf(`"hedgingDelay":%q,`, delay)
	}
	js := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"hedgingPolicy":{
		"maxAttempts":%d,%s"nonFatalStatusCodes":["UNAVAILABLE"]}}]%s}`, grpctest.Service, maxAttempts, d, extra)
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const throttling = `,"retryThrottling":{"maxTokens":10,"tokenRatio":1}`

// serverNames gives each test server a throttle of its own: throttles are
// kept per server name for the whole process, and a later test may get a
// port an earlier one used.
var (
	serverNames sync.Map // *grpctest.Server -> string
	serverSeq   atomic.Int64
)

func serverName(srv *grpctest.Server) string {
	v, _ := serverNames.LoadOrStore(srv, fmt.Sprint("hedge-test-", serverSeq.Add(1)))
	return v.(string)
}

// throttleOf returns the throttle the client of srv uses under cfg.
func throttleOf(t *testing.T, srv *grpctest.Server, cfg *serviceconfig.Config) *rebound.Throttle {
	t.Helper()
	th, err := a6.Throttle(serverName(srv), cfg.RetryThrottling)
	if err != nil || th == nil {
		t.Fatalf("no throttle: %v", err)
	}
	return th
}

// verdict is how the server answers one attempt.
type verdict struct {
	err             error // nil answers OK
	body            string
	header, trailer metadata.MD
}

func fail(code codes.Code, msg string) verdict { return verdict{err: status.Error(code, msg)} }

func pushbackVerdict(code codes.Code, ms string) verdict {
	return verdict{err: status.Error(code, "pushback "+ms), trailer: metadata.Pairs(a6.PushbackHeader, ms)}
}

// script is a server whose attempts, numbered by the client (from
// grpc-previous-rpc-attempts), each wait for the test's verdict. The
// server reports "start n" when attempt n arrives and "cancel n" when the
// client cancels it.
type script struct {
	t       *testing.T
	events  chan string
	verdict [8]chan verdict
}

func newScript(t *testing.T) *script {
	s := &script{t: t, events: make(chan string, 64)}
	for i := range s.verdict {
		s.verdict[i] = make(chan verdict, 1)
	}
	return s
}

func (s *script) handlers() grpctest.Handlers {
	return grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		n := grpcretry.PreviousAttempts(ctx) + 1
		s.events <- fmt.Sprint("start ", n)
		select {
		case v := <-s.verdict[n]:
			if v.header != nil {
				if err := grpc.SendHeader(ctx, v.header); err != nil {
					return nil, err
				}
			}
			if v.trailer != nil {
				if err := grpc.SetTrailer(ctx, v.trailer); err != nil {
					return nil, err
				}
			}
			if v.err != nil {
				return nil, v.err
			}
			return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: []byte(v.body)}}, nil
		case <-ctx.Done():
			s.events <- fmt.Sprint("cancel ", n)
			return nil, ctx.Err()
		}
	}}
}

// answer sends attempt n's verdict.
func (s *script) answer(n int, v verdict) { s.verdict[n] <- v }

// expect reads the next events, in any order within the group.
func (s *script) expect(want ...string) {
	s.t.Helper()
	var got []string
	for range want {
		select {
		case e := <-s.events:
			got = append(got, e)
		case <-time.After(10 * time.Second):
			s.t.Fatalf("events %v, still waiting for %v", got, want)
		}
	}
	s.match(got, want)
}

// match fails unless got holds the events of want, in any order.
func (s *script) match(got, want []string) {
	s.t.Helper()
	slices.Sort(got)
	w := slices.Clone(want)
	slices.Sort(w)
	if !slices.Equal(got, w) {
		s.t.Fatalf("events %v, want %v", got, want)
	}
}

// expectBefore is expect for events that must come before call p ends at
// its deadline. When the deadline came first (p ended with
// DEADLINE_EXCEEDED, or the server saw an attempt cancelled), it returns
// an error: a stretch scenario's outcome that only a slow machine
// explains, the attempts not reaching the server in time.
func (s *script) expectBefore(p *pending, want ...string) error {
	s.t.Helper()
	var got []string
	for len(got) < len(want) {
		var e string
		select {
		case e = <-s.events:
		case <-p.done:
			select {
			case e = <-s.events: // it came as the call ended
			default:
				return s.late(p, got, want)
			}
		case <-time.After(10 * time.Second):
			s.t.Fatalf("events %v, still waiting for %v", got, want)
		}
		if strings.HasPrefix(e, "cancel ") {
			p.wait()
			return s.late(p, append(got, e), want)
		}
		got = append(got, e)
	}
	s.match(got, want)
	return nil
}

// late is expectBefore's verdict on a call p that ended before the server
// saw want: too slow at DEADLINE_EXCEEDED, and a failure of the test with
// any other status.
func (s *script) late(p *pending, got, want []string) error {
	s.t.Helper()
	if status.Code(p.err) != codes.DeadlineExceeded {
		s.t.Fatalf("events %v, still waiting for %v, when the call ended: %v", got, want, p.err)
	}
	return fmt.Errorf("the call's deadline came after %d attempts (%v), with events %v, still waiting for %v", p.attempts, p.err, got, want)
}

// quiet fails on an event not yet read.
func (s *script) quiet() {
	s.t.Helper()
	select {
	case e := <-s.events:
		s.t.Fatalf("unexpected event %q", e)
	default:
	}
}

// hedgeClient dials srv through rebound with a manual fake clock.
func hedgeClient(t *testing.T, srv *grpctest.Server, cfg *serviceconfig.Config, dial []grpc.DialOption, opts ...grpcretry.Option) (*grpc.ClientConn, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New()
	c, err := grpcretry.New(cfg, append([]grpcretry.Option{grpcretry.WithClock(clk), grpcretry.WithServerName(serverName(srv))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return srv.Dial(t, append(c.DialOptions(), dial...)...), clk
}

// pending is a call running in the background.
type pending struct {
	t     *testing.T
	done  chan struct{}
	reply *testpb.SimpleResponse
	err   error

	attempts        int
	header, trailer metadata.MD
	peer            peer.Peer
	finished        []error // OnFinish calls
}

// start makes a unary call on cc with every write-back option; reply may
// be pre-filled.
func start(t *testing.T, ctx context.Context, cc *grpc.ClientConn, reply *testpb.SimpleResponse) *pending {
	p := &pending{t: t, done: make(chan struct{}), reply: reply}
	go func() {
		defer close(p.done)
		p.err = cc.Invoke(ctx, grpctest.UnaryCall, grpctest.Request("hedged"), p.reply,
			grpcretry.CountAttempts(&p.attempts), grpc.Header(&p.header), grpc.Trailer(&p.trailer), grpc.Peer(&p.peer),
			grpc.OnFinish(func(err error) { p.finished = append(p.finished, err) }))
	}()
	return p
}

func (p *pending) wait() error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(10 * time.Second):
		p.t.Fatal("the call did not return")
		return nil
	}
}

// check asserts the call's error, its reason and the number of attempts.
func (p *pending) check(code codes.Code, reason error, attempts int) {
	p.t.Helper()
	err := p.wait()
	if status.Code(err) != code || (reason != nil && !errors.Is(err, reason)) || p.attempts != attempts {
		p.t.Fatalf("call: %v after %d attempts; want %v (%v) after %d", err, p.attempts, code, reason, attempts)
	}
	if code != codes.OK {
		var ge *rebound.Error
		if !errors.As(err, &ge) || ge.Attempts != attempts {
			p.t.Fatalf("call: %v, want a *rebound.Error with %d attempts", err, attempts)
		}
	}
	if len(p.finished) != 1 || status.Code(p.finished[0]) != code {
		p.t.Fatalf("OnFinish called with %v, want once with %v", p.finished, code)
	}
}

func TestHedgeScheduleAndWinner(t *testing.T) {
	s := newScript(t)
	srv := grpctest.Start(t, s.handlers())
	cc, clk := hedgeClient(t, srv, hedgeConfig(t, 3, "0.1s", ""), nil)
	p := start(t, context.Background(), cc, &testpb.SimpleResponse{Username: "stale"})
	s.expect("start 1")
	clk.WaitCreated(1)
	clk.Advance(99 * time.Millisecond)
	if clk.Pending() != 1 {
		t.Fatal("the hedge fired before hedgingDelay")
	}
	clk.Advance(time.Millisecond)
	s.expect("start 2")
	clk.WaitCreated(2)
	clk.Advance(100 * time.Millisecond)
	s.expect("start 3")
	s.quiet()
	s.answer(2, verdict{body: "two", header: metadata.Pairs("from", "2"), trailer: metadata.Pairs("t", "2")})
	// The losers are cancelled, and the server sees it.
	s.expect("cancel 1", "cancel 3")
	p.check(codes.OK, nil, 3)
	if body := string(p.reply.GetPayload().GetBody()); body != "two" || p.reply.GetUsername() != "" {
		t.Fatalf("reply %v, want attempt 2's alone", p.reply)
	}
	if p.header.Get("from")[0] != "2" || p.trailer.Get("t")[0] != "2" {
		t.Fatalf("header %v, trailer %v; want attempt 2's", p.header, p.trailer)
	}
	if p.peer.Addr == nil || p.peer.Addr.String() != srv.Addr {
		t.Fatalf("peer %v, want %s", p.peer.Addr, srv.Addr)
	}
	if got := previous(srv.Attempts(grpctest.UnaryCall)); !slices.Equal(got, []int{-1, 1, 2}) {
		t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
	}
	if got := clk.Sleeps(); !slices.Equal(got, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}) {
		t.Fatalf("hedge timers %v, want two of hedgingDelay", got)
	}
	if clk.Pending() != 0 {
		t.Fatal("a hedge timer outlived the call")
	}
}

func TestHedgeFirstAttemptWins(t *testing.T) {
	s := newScript(t)
	srv := grpctest.Start(t, s.handlers())
	cc, clk := hedgeClient(t, srv, hedgeConfig(t, 3, "0.1s", ""), nil)
	p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
	s.expect("start 1")
	clk.WaitCreated(1)
	clk.Advance(100 * time.Millisecond)
	s.expect("start 2")
	s.answer(1, verdict{body: "one", header: metadata.Pairs("from", "1")})
	s.expect("cancel 2")
	p.check(codes.OK, nil, 2)
	if string(p.reply.GetPayload().GetBody()) != "one" || p.header.Get("from")[0] != "1" {
		t.Fatalf("reply %v, header %v; want attempt 1's", p.reply, p.header)
	}
}

func TestHedgeZeroDelaySendsAll(t *testing.T) {
	for _, delay := range []string{"0s", ""} {
		t.Run("delay="+delay, func(t *testing.T) {
			s := newScript(t)
			srv := grpctest.Start(t, s.handlers())
			cc, clk := hedgeClient(t, srv, hedgeConfig(t, 3, delay, ""), nil)
			p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
			s.expect("start 1", "start 2", "start 3")
			s.answer(3, verdict{body: "three"})
			s.expect("cancel 1", "cancel 2")
			p.check(codes.OK, nil, 3)
			if string(p.reply.GetPayload().GetBody()) != "three" {
				t.Fatalf("reply %v, want attempt 3's", p.reply)
			}
			if len(clk.Sleeps()) != 0 {
				t.Fatalf("timers %v with a zero delay", clk.Sleeps())
			}
		})
	}
}

func TestHedgeMaxAttemptsClamped(t *testing.T) {
	for _, tc := range []struct {
		config int
		opts   []grpcretry.Option
		want   int
	}{
		{10, nil, 5},
		{10, []grpcretry.Option{grpcretry.WithMaxAttemptsCap(3)}, 3},
		{2, []grpcretry.Option{grpcretry.WithMaxAttemptsCap(7)}, 2},
	} {
		srv := grpctest.Start(t, failFirst(100, codes.Unavailable))
		cc, _ := hedgeClient(t, srv, hedgeConfig(t, tc.config, "0s", ""), nil, tc.opts...)
		var n int
		_, err := testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
		if !errors.Is(err, rebound.ErrAttemptsExhausted) || n != tc.want || srv.Count(grpctest.UnaryCall) != tc.want {
			t.Errorf("maxAttempts %d with %d options: %v after %d attempts (server %d), want %d", tc.config, len(tc.opts), err, n, srv.Count(grpctest.UnaryCall), tc.want)
		}
	}
}

func TestHedgeNonFatalSendsNextAtOnce(t *testing.T) {
	s := newScript(t)
	srv := grpctest.Start(t, s.handlers())
	cfg := hedgeConfig(t, 3, "0.1s", throttling)
	cc, clk := hedgeClient(t, srv, cfg, nil)
	p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
	s.expect("start 1")
	clk.WaitCreated(1)
	clk.Advance(30 * time.Millisecond)
	s.answer(1, fail(codes.Unavailable, "one"))
	s.expect("start 2") // at once, without the clock moving
	clk.WaitCreated(2)
	// Hedging resumes hedgingDelay after the shortcut: the first timer,
	// due at 100ms, is gone; the next is due at 130ms.
	clk.Advance(70 * time.Millisecond)
	if clk.Pending() != 1 {
		t.Fatal("the hedge fired at the original schedule")
	}
	clk.Advance(30 * time.Millisecond)
	s.expect("start 3")
	s.answer(2, fail(codes.Unavailable, "two"))
	s.answer(3, fail(codes.Unavailable, "three"))
	p.check(codes.Unavailable, rebound.ErrAttemptsExhausted, 3)
	if got := clk.Sleeps(); !slices.Equal(got, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}) {
		t.Fatalf("hedge timers %v, want [100ms 100ms]", got)
	}
	if th := throttleOf(t, srv, cfg); th.Tokens() != 7000 {
		t.Fatalf("three non-fatal failures left %d milli-tokens, want 7000", th.Tokens())
	}
}

// TestHedgeAllFailedWaitsForOutstanding: when no attempt is left to send,
// a failure does not end the call while another attempt is in flight.
func TestHedgeAllFailedWaitsForOutstanding(t *testing.T) {
	s := newScript(t)
	srv := grpctest.Start(t, s.handlers())
	cfg := hedgeConfig(t, 2, "0s", throttling)
	cc, _ := hedgeClient(t, srv, cfg, nil)
	th := throttleOf(t, srv, cfg)
	p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
	s.expect("start 1", "start 2")
	s.answer(1, verdict{err: status.Error(codes.Unavailable, "one"), trailer: metadata.Pairs("from", "1")})
	// The engine counts the failure against the throttle once it has
	// taken it in.
	waitFor(t, func() bool { return th.Tokens() == 9000 })
	s.answer(2, verdict{err: status.Error(codes.Unavailable, "two"), trailer: metadata.Pairs("from", "2")})
	p.check(codes.Unavailable, rebound.ErrAttemptsExhausted, 2)
	// The status, and the trailer handed back, are those of the attempt
	// that ended last; attempt 2 was never cancelled.
	if st, _ := status.FromError(p.err); st.Message() != "two" || p.trailer.Get("from")[0] != "2" {
		t.Fatalf("call ended with %v, trailer %v; want attempt 2's", p.err, p.trailer)
	}
	s.quiet()
	if srv.Count(grpctest.UnaryCall) != 2 {
		t.Fatalf("server saw %d attempts, want 2: no retries after hedges", srv.Count(grpctest.UnaryCall))
	}
}

// waitFor polls cond until it holds, for at most 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHedgeFatalCancelsAll(t *testing.T) {
	s, srv, cfg, clk, p := twoHedges(t)
	s.answer(2, verdict{err: status.Error(codes.InvalidArgument, "bad"), trailer: metadata.Pairs("why", "bad")})
	s.expect("cancel 1")
	p.check(codes.InvalidArgument, rebound.ErrNotRetryable, 2)
	if p.trailer.Get("why")[0] != "bad" {
		t.Fatalf("trailer %v, want the fatal attempt's", p.trailer)
	}
	if clk.Pending() != 0 || srv.Count(grpctest.UnaryCall) != 2 {
		t.Fatalf("%d timers pending, server saw %d attempts; want no further hedge", clk.Pending(), srv.Count(grpctest.UnaryCall))
	}
	if th := throttleOf(t, srv, cfg); th.Tokens() != 10000 {
		t.Fatalf("a fatal failure took tokens: %d", th.Tokens())
	}
}

func TestHedgePushbackStop(t *testing.T) {
	s, srv, cfg, clk, p := twoHedges(t)
	s.answer(2, pushbackVerdict(codes.Unavailable, "-1"))
	// No further hedge: the timer goes; attempt 1 runs on.
	if !clk.WaitPending(0) {
		t.Fatal("the hedge timer survived pushback stop")
	}
	s.answer(1, fail(codes.Unavailable, "one"))
	p.check(codes.Unavailable, rebound.ErrPushback, 2)
	s.quiet()
	if th := throttleOf(t, srv, cfg); th.Tokens() != 8000 {
		t.Fatalf("two failures left %d milli-tokens, want 8000", th.Tokens())
	}
}

func TestHedgeFatalPushbackStopCancelsAll(t *testing.T) {
	s, srv, cfg, _, p := twoHedges(t)
	s.answer(2, pushbackVerdict(codes.PermissionDenied, "-1"))
	s.expect("cancel 1")
	p.check(codes.PermissionDenied, rebound.ErrPushback, 2)
	if th := throttleOf(t, srv, cfg); th.Tokens() != 9000 {
		t.Fatalf("pushback stop left %d milli-tokens, want 9000", th.Tokens())
	}
}

func TestHedgePushbackDelay(t *testing.T) {
	s := newScript(t)
	srv := grpctest.Start(t, s.handlers())
	cc, clk := hedgeClient(t, srv, hedgeConfig(t, 4, "0.1s", ""), nil)
	p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
	s.expect("start 1")
	clk.WaitCreated(1)
	s.answer(1, pushbackVerdict(codes.Unavailable, "300"))
	// The next hedge goes 300ms after the pushback, not at once.
	clk.WaitCreated(2)
	clk.Advance(299 * time.Millisecond)
	if clk.Pending() != 1 {
		t.Fatal("the hedge went before the pushback delay")
	}
	clk.Advance(time.Millisecond)
	s.expect("start 2")
	// Later hedges follow at hedgingDelay: n + hedgingDelay.
	clk.WaitCreated(3)
	clk.Advance(100 * time.Millisecond)
	s.expect("start 3")
	s.answer(3, verdict{body: "three"})
	s.expect("cancel 2")
	p.check(codes.OK, nil, 3)
	want := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
	if got := clk.Sleeps(); !slices.Equal(got, want) {
		t.Fatalf("hedge timers %v, want %v", got, want)
	}
}

func TestHedgePushbackPastDeadline(t *testing.T) {
	s := newScript(t)
	srv := grpctest.Start(t, s.handlers())
	cc, clk := hedgeClient(t, srv, hedgeConfig(t, 3, "0.1s", ""), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := start(t, ctx, cc, new(testpb.SimpleResponse))
	s.expect("start 1")
	clk.WaitCreated(1)
	s.answer(1, pushbackVerdict(codes.Unavailable, "60000"))
	// The hedge would go after the deadline: the call ends now, with the
	// attempt's status, rather than at the deadline.
	p.check(codes.Unavailable, rebound.ErrDeadline, 1)
	if clk.Pending() != 0 {
		t.Fatal("a timer outlived the call")
	}
}

func TestHedgeThrottle(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1000, codes.Unavailable))
	cfg := hedgeConfig(t, 3, "0s", `,"retryThrottling":{"maxTokens":4,"tokenRatio":1}`)
	cc, _ := hedgeClient(t, srv, cfg, nil)
	tc := testpb.NewTestServiceClient(cc)
	th := throttleOf(t, srv, cfg)
	call := func(wantAttempts int, wantReason error, wantTokens int64) {
		t.Helper()
		var n int
		before := srv.Count(grpctest.UnaryCall)
		_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
		if (wantReason == nil) != (err == nil) || (wantReason != nil && !errors.Is(err, wantReason)) {
			t.Fatalf("err %v, want %v", err, wantReason)
		}
		// A success cancels the other attempts, which may not reach the
		// server; failures are all seen.
		if sent := srv.Count(grpctest.UnaryCall) - before; n != wantAttempts || (err != nil && sent != wantAttempts) {
			t.Fatalf("%d attempts (server %d), want %d", n, sent, wantAttempts)
		}
		if th.Tokens() != wantTokens {
			t.Fatalf("%d milli-tokens, want %d", th.Tokens(), wantTokens)
		}
	}
	// 4 tokens, threshold 2: both hedges go; three failures take 3.
	call(3, rebound.ErrAttemptsExhausted, 1000)
	// At or below the threshold the first attempt still goes, alone.
	call(1, rebound.ErrThrottled, 0)
	srv.SetHandlers(grpctest.Handlers{})
	call(1, nil, 1000)
	call(1, nil, 2000)
	call(1, nil, 3000) // 2 is not above the threshold
	// 3 is: hedges go again, the first success wins. The attempts answer
	// once the third has arrived, so that the first's answer cannot come
	// before the hedges are sent on a busy machine (a call that sent no
	// hedges waits 10s and fails the count).
	third, all := srv.Count(grpctest.UnaryCall)+3, make(chan struct{})
	srv.SetHandlers(grpctest.Handlers{Unary: func(ctx context.Context, i int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if i == third {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &testpb.SimpleResponse{}, nil
	}})
	call(3, nil, 4000)
}

func TestHedgeDeadlineCoversAllHedges(t *testing.T) {
	t.Parallel()
	// The deadline must leave the two attempts time to reach the server
	// (attempt 1 opens the connection): on a busy machine that takes
	// longer, and a call that ended before they arrived is tried again
	// with a longer one.
	stretch.Run(t, time.Second, 16*time.Second, func(d time.Duration) error {
		s := newScript(t)
		srv := grpctest.Start(t, s.handlers())
		cc, clk := hedgeClient(t, srv, hedgeConfig(t, 3, "0.1s", ""), nil)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		p := start(t, ctx, cc, new(testpb.SimpleResponse))
		if err := s.expectBefore(p, "start 1"); err != nil {
			return err
		}
		clk.WaitCreated(1)
		clk.Advance(100 * time.Millisecond)
		if err := s.expectBefore(p, "start 2"); err != nil {
			return err
		}
		// Neither answers: the call's one deadline ends both, and the
		// third attempt is never sent. (Which side notices the deadline
		// first decides the reason: the client's context, or the
		// server's DEADLINE_EXCEEDED, a fatal code.)
		select {
		case <-p.done:
		case <-time.After(d + 10*time.Second):
			t.Fatal("the call did not return 10s after its deadline")
		}
		s.expect("cancel 1", "cancel 2")
		p.check(codes.DeadlineExceeded, nil, 2)
		if clk.Pending() != 0 || srv.Count(grpctest.UnaryCall) != 2 {
			t.Fatalf("%d timers pending and %d attempts after the deadline", clk.Pending(), srv.Count(grpctest.UnaryCall))
		}
		return nil
	})
}

func TestHedgeCallerCancels(t *testing.T) {
	s := newScript(t)
	srv := grpctest.Start(t, s.handlers())
	cc, clk := hedgeClient(t, srv, hedgeConfig(t, 3, "0.1s", ""), nil)
	ctx, cancel := context.WithCancel(context.Background())
	p := start(t, ctx, cc, new(testpb.SimpleResponse))
	s.expect("start 1")
	clk.WaitCreated(1)
	clk.Advance(100 * time.Millisecond)
	s.expect("start 2")
	cancel()
	s.expect("cancel 1", "cancel 2")
	p.check(codes.Canceled, context.Canceled, 2)
	if clk.Pending() != 0 {
		t.Fatal("a timer outlived the call")
	}
}

func TestHedgeCommitted(t *testing.T) {
	s := newScript(t)
	srv := grpctest.Start(t, s.handlers())
	cc, clk := hedgeClient(t, srv, hedgeConfig(t, 3, "0.1s", ""), nil)
	p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
	s.expect("start 1")
	clk.WaitCreated(1)
	clk.Advance(100 * time.Millisecond)
	s.expect("start 2")
	// Headers, then a non-fatal status: the response had started, so it
	// is the call's answer.
	s.answer(1, verdict{err: status.Error(codes.Unavailable, "after headers"), header: metadata.Pairs("from", "1")})
	s.expect("cancel 2")
	p.check(codes.Unavailable, rebound.ErrCommitted, 2)
	if p.header.Get("from")[0] != "1" {
		t.Fatalf("header %v, want attempt 1's", p.header)
	}
}

// plainReply is a reply type for a codec other than proto's.
type plainReply struct{ Body string }

// invokeDirect calls rebound's interceptor with a fake invoker.
func invokeDirect(t *testing.T, cfg *serviceconfig.Config, reply any, invoker grpc.UnaryInvoker) (int, error) {
	t.Helper()
	c, err := grpcretry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = c.UnaryClientInterceptor()(context.Background(), grpctest.UnaryCall, grpctest.Request("x"), reply, nil, invoker, grpcretry.CountAttempts(&n))
	return n, err
}

func attemptOf(ctx context.Context) int {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md[a6.PreviousAttemptsHeader]; len(v) == 1 {
		p, _ := strconv.Atoi(v[0])
		return p + 1
	}
	return 1
}

func TestHedgePlainPointerReply(t *testing.T) {
	reply := &plainReply{Body: "stale"}
	n, err := invokeDirect(t, hedgeConfig(t, 2, "0s", ""), reply, func(ctx context.Context, _ string, _, r any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		if attemptOf(ctx) == 1 {
			<-ctx.Done() // loses
			return status.FromContextError(ctx.Err()).Err()
		}
		r.(*plainReply).Body = "two"
		return nil
	})
	if err != nil || n != 2 || reply.Body != "two" {
		t.Fatalf("call: %v after %d attempts, reply %+v; want attempt 2's reply", err, n, reply)
	}
}

// TestHedgeReplyNotCopyable: a reply that is not a non-nil pointer cannot
// be duplicated, so the call is made once.
func TestHedgeReplyNotCopyable(t *testing.T) {
	for _, reply := range []any{plainReply{}, (*plainReply)(nil), (*testpb.SimpleResponse)(nil), nil} {
		calls := 0
		n, err := invokeDirect(t, hedgeConfig(t, 3, "0s", ""), reply, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			calls++
			return status.Error(codes.Unavailable, "down")
		})
		if status.Code(err) != codes.Unavailable || n != 1 || calls != 1 {
			t.Errorf("reply %T: %v after %d attempts (%d invoker calls), want one attempt", reply, err, n, calls)
		}
	}
}

func TestHedgeRetriesDisabled(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
	cc, _ := hedgeClient(t, srv, hedgeConfig(t, 3, "0s", ""), nil, grpcretry.WithRetriesDisabled())
	var n int
	_, err := testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
	if status.Code(err) != codes.Unavailable || n != 1 || srv.Count(grpctest.UnaryCall) != 1 {
		t.Fatalf("%v after %d attempts, want one", err, n)
	}
}

// twoHedges starts a call under a 3-attempt, 100ms hedging policy with
// throttling and runs it until its second attempt has started.
func twoHedges(t *testing.T) (*script, *grpctest.Server, *serviceconfig.Config, *clocktest.Clock, *pending) {
	t.Helper()
	s := newScript(t)
	srv := grpctest.Start(t, s.handlers())
	cfg := hedgeConfig(t, 3, "0.1s", throttling)
	cc, clk := hedgeClient(t, srv, cfg, nil)
	p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
	s.expect("start 1")
	clk.WaitCreated(1)
	clk.Advance(100 * time.Millisecond)
	s.expect("start 2")
	return s, srv, cfg, clk, p
}

// Every call on a conn, the first and those after it, gives the caller the
// winner's header and trailer, commits on an attempt's headers and stops on
// a pushback in its trailer, with rebound's stats
// handler on the conn (which hands the attempts their headers once it has
// been seen to) and without it (interceptors installed by hand, which ask
// grpc-go for each attempt's header).
func TestHedgeHeadersEveryCall(t *testing.T) {
	for _, withHandler := range []bool{true, false} {
		t.Run(fmt.Sprint("stats handler ", withHandler), func(t *testing.T) {
			s := newScript(t)
			srv := grpctest.Start(t, s.handlers())
			clk := clocktest.New()
			c, err := grpcretry.New(hedgeConfig(t, 2, "0.1s", ""), grpcretry.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			opts := c.DialOptions()
			if !withHandler {
				opts = []grpc.DialOption{grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor())}
			}
			cc := srv.Dial(t, opts...)
			for call := range 3 {
				// The first attempt wins before the delay.
				p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
				s.expect("start 1")
				clk.WaitCreated(4*call + 1)
				s.answer(1, verdict{header: metadata.Pairs("from", "1"), trailer: metadata.Pairs("t", "1")})
				p.check(codes.OK, nil, 1)
				if !slices.Equal(p.header.Get("from"), []string{"1"}) || !slices.Equal(p.trailer.Get("t"), []string{"1"}) {
					t.Fatalf("call %d: header %v, trailer %v; want attempt 1's", call, p.header, p.trailer)
				}
				// A hedge wins.
				p = start(t, context.Background(), cc, new(testpb.SimpleResponse))
				s.expect("start 1")
				clk.WaitCreated(4*call + 2)
				clk.Advance(100 * time.Millisecond)
				s.expect("start 2")
				s.answer(2, verdict{body: "two", header: metadata.Pairs("from", "2"), trailer: metadata.Pairs("t", "2")})
				s.expect("cancel 1")
				p.check(codes.OK, nil, 2)
				if !slices.Equal(p.header.Get("from"), []string{"2"}) || !slices.Equal(p.trailer.Get("t"), []string{"2"}) {
					t.Fatalf("call %d: header %v, trailer %v; want attempt 2's", call, p.header, p.trailer)
				}
				// Headers, then a non-fatal status: committed.
				p = start(t, context.Background(), cc, new(testpb.SimpleResponse))
				s.expect("start 1")
				clk.WaitCreated(4*call + 3)
				s.answer(1, verdict{err: status.Error(codes.Unavailable, "after headers"), header: metadata.Pairs("from", "1")})
				p.check(codes.Unavailable, rebound.ErrCommitted, 1)
				if !slices.Equal(p.header.Get("from"), []string{"1"}) {
					t.Fatalf("call %d: header %v, want attempt 1's", call, p.header)
				}
				// The trailer's pushback says stop (trailers only).
				p = start(t, context.Background(), cc, new(testpb.SimpleResponse))
				s.expect("start 1")
				clk.WaitCreated(4*call + 4)
				s.answer(1, pushbackVerdict(codes.Unavailable, "-1"))
				p.check(codes.Unavailable, rebound.ErrPushback, 1)
				if !slices.Equal(p.trailer.Get(a6.PushbackHeader), []string{"-1"}) {
					t.Fatalf("call %d: trailer %v, want the pushback", call, p.trailer)
				}
			}
			s.quiet()
			// Of the 12 calls, 3 sent a hedge; 3 were stopped by pushback.
			got := c.Stats()[grpctest.UnaryCall]
			if got.Calls != 12 || got.Hedges.Attempts != 3 || got.Retries.Attempts != 0 || got.PushbackStops != 3 {
				t.Fatalf("stats %+v, want 12 calls, 3 hedges, 3 pushback stops", got)
			}
		})
	}
}
