package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// dialManual is dial with a clock that moves only when the test says.
func dialManual(t testing.TB, s *server, p protocol, cfg *serviceconfig.Config, opts ...connectretry.Option) (clients, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New()
	i, err := connectretry.New(cfg, append([]connectretry.Option{connectretry.WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return newClients(s, p, i), clk
}

// TestHedgeRequestNotModified: hedged attempts run on copies of the
// caller's request, and the winner's is copied back, so the caller's
// request reports the HTTP method used and gains no attempts header.
func TestHedgeRequestNotModified(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, failFirst(1, connect.CodeUnavailable), p.http2)
			c, _ := dialManual(t, srv, p, hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""))
			req := connect.NewRequest(wrapperspb.String("x"))
			if _, err := c.unary.CallUnary(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if got := srv.previous(unary); !slices.Equal(got, []int{-1, 1}) {
				t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1]", got)
			}
			if req.HTTPMethod() != http.MethodPost || req.Header().Get("Grpc-Previous-Rpc-Attempts") != "" {
				t.Fatalf("caller's request: method %q, header %v", req.HTTPMethod(), req.Header())
			}
		})
	}
}

func TestHedgeHidesCallInfo(t *testing.T) {
	srv := startServer(t, handlers{unary: func(_ context.Context, n int, _ *request) (*connect.Response[msg], error) {
		if n < 3 {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("again"))
		}
		resp := connect.NewResponse(&msg{})
		resp.Header().Set("Attempt", fmt.Sprint(n))
		return resp, nil
	}}, true)
	// All three attempts at once: connect would record each on the
	// CallInfo concurrently.
	c, _ := dialManual(t, srv, protocols[1], hedgeConfig(t, 3, "0s", `"UNAVAILABLE"`, ""))
	ctx, info := connect.NewClientContext(context.Background())
	info.RequestHeader().Set("X-From-Call-Info", "yes")
	resp, err := call(ctx, c.unary, "x")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header().Get("Attempt") != "3" {
		t.Fatalf("response header Attempt %q, want 3", resp.Header().Get("Attempt"))
	}
	if info.ResponseHeader() != nil {
		t.Fatalf("CallInfo response header %v, want none for a hedged call", info.ResponseHeader())
	}
	for i, a := range srv.seen(unary) {
		if a.header.Get("X-From-Call-Info") != "yes" {
			t.Fatalf("attempt %d lacks the CallInfo's request header", i+1)
		}
	}
}
