package suite

// Tests of what connectretry/v2 does that connect v1 has no word for: the
// CallInfo that carries a call's metadata, errors that know whether they
// are a peer's verdict, and Specs that every call carries.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectinprocess"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	connectretry "github.com/rebound-go/rebound/connectretry/v2"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// eachV2 runs f as a subtest for v2 in each of its protocols.
func eachV2(t *testing.T, f func(t *testing.T, e env)) {
	t.Helper()
	for _, p := range v2.protocols {
		e := env{v2, p}
		t.Run(e.String(), func(t *testing.T) { f(t, e) })
	}
}

// TestV2CallInfo: the caller's CallInfo describes the attempt the call
// ended with (its response header and trailer, its peer), and keeps the
// caller's request header as it was; every attempt was sent that header.
func TestV2CallInfo(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		t.Run(fmt.Sprint("hedged=", hedged), func(t *testing.T) {
			eachV2(t, func(t *testing.T, e env) {
				s := e.start(t, handlers{unary: func(in *call) (string, error) {
					in.setHeader("Attempt", fmt.Sprint(in.n))
					in.setTrailer("Attempt-Trailer", fmt.Sprint(in.n))
					if in.n < 3 {
						return "", fail(serviceconfig.Unavailable, "again")
					}
					return "ok", nil
				}})
				cfg, clk := retryConfig(t, 4, `"UNAVAILABLE"`, ""), clocktest.NewAuto()
				if hedged {
					// The clock never moves: each hedge follows the
					// failure of the one before, and the third wins.
					cfg, clk = hedgeConfig(t, 4, "10s", `"UNAVAILABLE"`, ""), clocktest.New()
				}
				i, err := connectretry.New(cfg, connectretry.WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				c := connect.NewClient(v2Transport(s, e.p), i.WrapClient)
				ctx, info := connect.NewClientContext(context.Background())
				info.RequestHeader().Set("X-From-Call-Info", "yes")
				var res msg
				if err := c.CallUnary(ctx, v2Spec(unary), wrapperspb.String("x"), &res); err != nil {
					t.Fatal(err)
				}
				if res.GetValue() != "ok" || info.ResponseHeader().Get("Attempt") != "3" || info.ResponseTrailer().Get("Attempt-Trailer") != "3" {
					t.Fatalf("response %q, CallInfo header %v, trailer %v; want attempt 3's", res.GetValue(),
						info.ResponseHeader().Get("Attempt"), info.ResponseTrailer().Get("Attempt-Trailer"))
				}
				if info.Spec.Procedure != unary || info.PeerAddr != strings.TrimPrefix(s.url, "http://") {
					t.Fatalf("CallInfo spec %q, peer %q", info.Spec.Procedure, info.PeerAddr)
				}
				if got := info.RequestHeader().Values("Grpc-Previous-Rpc-Attempts"); got != nil || info.RequestHeader().Len() != 1 {
					t.Fatalf("the caller's request header changed: %v", info.RequestHeader())
				}
				for k, a := range s.seen(unary) {
					if a.header.Get("X-From-Call-Info") != "yes" {
						t.Fatalf("attempt %d lacks the CallInfo's request header", k+1)
					}
				}
			})
		})
	}
}

// TestV2StreamCallInfo: a stream retried after its first attempt failed
// shows the caller, through its CallInfo, the response header and trailer
// of the attempt it committed to, not the failed one's.
func TestV2StreamCallInfo(t *testing.T) {
	eachV2(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{serverStream: func(in *call, send func(string) error) error {
			in.setHeader("Attempt", fmt.Sprint(in.n))
			in.setTrailer("Attempt-Trailer", fmt.Sprint(in.n))
			if in.n == 1 {
				return fail(serviceconfig.Unavailable, "again")
			}
			return send("one")
		}})
		c, _ := e.dialAuto(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
		st, err := c.open(context.Background(), serverStream, "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		vs := st.(*v2Stream)
		if m, err := st.Receive(); err != nil || m != "one" {
			t.Fatalf("first message %q, %v", m, err)
		}
		// connecthttp fills the CallInfo in as the response arrives;
		// connectinprocess as the handler returns.
		if got := vs.info.ResponseHeader().Get("Attempt"); e.p.over != inProcess && got != "2" {
			t.Fatalf("CallInfo header Attempt %q after the first message, want 2", got)
		}
		if _, err := st.Receive(); err == nil {
			t.Fatal("a second message")
		}
		if h, tr := vs.info.ResponseHeader().Get("Attempt"), vs.info.ResponseTrailer().Get("Attempt-Trailer"); h != "2" || tr != "2" {
			t.Fatalf("CallInfo header %q, trailer %q at the end, want attempt 2's", h, tr)
		}
		_ = st.Close()
	})
}

// TestV2RetryAtOneLayer: a v2 handler that calls its own backend through
// connectretry/v2 and passes the backend's error on, as it came, does not
// make its callers retry what was retried already. The error of a call
// that gave up keeps the last attempt's IsRemote, so connect's server
// transport sends it as CodeInternal, not as the handler's own
// unavailable: the backend sees the 3 attempts of one layer, not 3×3. A
// handler that makes the error its own verdict is retried by its callers,
// as it asked.
func TestV2RetryAtOneLayer(t *testing.T) {
	for _, tc := range []struct {
		name             string
		ownVerdict       bool
		backend, handler int // the attempts each sees
		code             code
	}{
		{"passed on", false, 3, 1, serviceconfig.Internal},
		{"its own verdict", true, 9, 3, serviceconfig.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachV2(t, func(t *testing.T, e env) {
				backend := e.start(t, failFirst(1<<30, serviceconfig.Unavailable))
				cfg := retryConfig(t, 3, `"UNAVAILABLE"`, "")
				inner, err := connectretry.New(cfg, connectretry.WithClock(clocktest.NewAuto()))
				if err != nil {
					t.Fatal(err)
				}
				toBackend := connect.NewClient(v2Transport(backend, e.p), inner.WrapClient)
				// The middle tier: a v2 handler that calls the backend.
				var handled atomic.Int32
				middle := connect.NewServer()
				middle.Register(connect.Method{Spec: v2Spec(unary), Handler: func(ctx context.Context, _ connect.Spec, st connect.ServerStream) error {
					handled.Add(1)
					var req, res msg
					if err := st.Receive(&req); err != nil {
						return err
					}
					if err := toBackend.CallUnary(ctx, v2Spec(unary), &req, &res); err != nil {
						if tc.ownVerdict {
							return connect.NewError(connect.CodeOf(err), "backend down")
						}
						return err
					}
					return st.Send(&res)
				}})
				var tr connect.Transport
				if e.p.over == inProcess {
					tr = connectinprocess.New(middle)
				} else {
					mux := http.NewServeMux()
					connecthttp.Mount(mux, middle)
					s := &server{}
					s.url, s.client = serveHTTP(t, mux, e.p.over)
					tr = v2Transport(s, e.p)
				}
				outer, err := connectretry.New(cfg, connectretry.WithClock(clocktest.NewAuto()))
				if err != nil {
					t.Fatal(err)
				}
				var res msg
				err = connect.NewClient(tr, outer.WrapClient).CallUnary(context.Background(), v2Spec(unary), wrapperspb.String("x"), &res)
				if e.codeOf(err) != tc.code || !e.remote(err) {
					t.Fatalf("err %v (remote %v), want the middle tier's %v", err, e.remote(err), tc.code)
				}
				if got := backend.count(unary); got != tc.backend || handled.Load() != int32(tc.handler) {
					t.Fatalf("backend saw %d attempts, the handler %d; want %d and %d", got, handled.Load(), tc.backend, tc.handler)
				}
			})
		})
	}
}

// TestV2HTTPGet: a call that connecthttp sends as a Connect GET (a
// procedure free of side effects) is retried as GETs.
func TestV2HTTPGet(t *testing.T) {
	s := v2.startServer(t, failFirst(2, serviceconfig.Unavailable), overHTTP1)
	i, err := connectretry.New(retryConfig(t, 4, `"UNAVAILABLE"`, ""), connectretry.WithClock(clocktest.NewAuto()))
	if err != nil {
		t.Fatal(err)
	}
	c := connect.NewClient(connecthttp.NewTransport(s.client, s.url, connecthttp.WithHTTPGet()), i.WrapClient)
	ctx, _ := connect.NewClientContext(context.Background())
	var res msg
	if err := c.CallUnary(ctx, v2Spec(unary), wrapperspb.String("q"), &res); err != nil {
		t.Fatal(err)
	}
	ci, _ := connecthttp.ClientInfoForContext(ctx)
	if res.GetValue() != "q from attempt 3" || ci.HTTPMethod() != http.MethodGet {
		t.Fatalf("response %q sent with %q, want the third attempt's, with GET", res.GetValue(), ci.HTTPMethod())
	}
	if got := s.previous(unary); !slices.Equal(got, []int{-1, 1, 2}) {
		t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
	}
}

func TestV2Idempotent(t *testing.T) {
	for _, tc := range []struct {
		stream connect.StreamType
		level  connect.IdempotencyLevel
		want   bool
	}{
		{connect.StreamTypeUnary, connect.IdempotencyNoSideEffects, true},
		{connect.StreamTypeUnary, connect.IdempotencyIdempotent, true},
		{connect.StreamTypeUnary, connect.IdempotencyUnknown, false},
		{connect.StreamTypeServer, connect.IdempotencyNoSideEffects, false},
		{connect.StreamTypeClient, connect.IdempotencyIdempotent, false},
		{connect.StreamTypeBidi, connect.IdempotencyIdempotent, false},
	} {
		if got := connectretry.Idempotent(connect.Spec{StreamType: tc.stream, IdempotencyLevel: tc.level}); got != tc.want {
			t.Errorf("Idempotent(%v, %v) = %v, want %v", tc.stream, tc.level, got, tc.want)
		}
	}
}

// TestV2AIP194: the config AIP194 builds from v2 Specs retries the safe
// procedures only, and a call of one is retried.
func TestV2AIP194(t *testing.T) {
	cfg, err := connectretry.AIP194(
		v2Spec(unary), // free of side effects
		connect.Spec{Procedure: "/a.v1.S/Create", StreamType: connect.StreamTypeUnary},
		connect.Spec{Procedure: "/a.v1.S/Watch", StreamType: connect.StreamTypeServer, IdempotencyLevel: connect.IdempotencyNoSideEffects},
	)
	if err != nil {
		t.Fatal(err)
	}
	for procedure, want := range map[string]bool{unary: true, "/a.v1.S/Create": false, "/a.v1.S/Watch": false} {
		if mc := cfg.MethodConfig(procedure); (mc != nil && mc.RetryPolicy != nil) != want {
			t.Errorf("%s: retried %v, want %v", procedure, !want, want)
		}
	}
	if _, err := connectretry.AIP194(connect.Spec{Procedure: "a.v1.S/Get"}); err == nil || !strings.Contains(err.Error(), "specs[0].Procedure") {
		t.Errorf("a bad procedure: %v, want an error naming specs[0].Procedure", err)
	}
	e := env{v2, inprocess}
	s := e.start(t, failFirst(1, serviceconfig.Unavailable))
	c, _ := e.dialAuto(t, s, cfg)
	if _, err := c.unary(context.Background(), "x", nil); err != nil || s.count(unary) != 2 {
		t.Fatalf("err %v after %d attempts, want success after 2", err, s.count(unary))
	}
}

// TestV2PreviousAttemptsOutsideHandler: PreviousAttempts is 0 on a
// context that is no handler's.
func TestV2PreviousAttemptsOutsideHandler(t *testing.T) {
	ctx, info := connect.NewClientContext(context.Background())
	info.RequestHeader().Set("Grpc-Previous-Rpc-Attempts", "3")
	if n := connectretry.PreviousAttempts(ctx); n != 0 {
		t.Fatalf("PreviousAttempts of a client's context = %d, want 0", n)
	}
}

// TestV2RejectedLocallyIsLocal: an attempt the adaptive throttle keeps
// home fails with an error that is no peer's verdict, so that a handler
// which passes it on sends it as its own.
func TestV2RejectedLocallyIsLocal(t *testing.T) {
	e := env{v2, inprocess}
	s := e.start(t, failFirst(1<<30, serviceconfig.Unavailable))
	c, _ := e.dialAuto(t, s, retryConfig(t, 2, `"UNAVAILABLE"`, ""),
		withServerName(uniqueName(t)), withAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}))
	var err error
	for range 10 {
		if _, err = c.unary(context.Background(), "x", nil); errors.Is(err, rebound.ErrRejectedLocally) {
			break
		}
	}
	if !errors.Is(err, rebound.ErrRejectedLocally) || e.remote(err) {
		t.Fatalf("err %v (remote %v), want a local rejection", err, e.remote(err))
	}
}
