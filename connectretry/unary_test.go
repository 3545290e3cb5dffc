package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

func TestRequestReplayedNotModified(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, failFirst(2, connect.CodeUnavailable), p.http2)
			c, _ := dial(t, srv, p, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
			req := connect.NewRequest(wrapperspb.String("payload-123"))
			req.Header().Set("X-Trace", "t1")
			if _, err := c.unary.CallUnary(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			for i, a := range srv.seen(unary) {
				if a.payload != "payload-123" || a.header.Get("X-Trace") != "t1" {
					t.Fatalf("attempt %d carried %q with X-Trace %q", i+1, a.payload, a.header.Get("X-Trace"))
				}
			}
			if v := req.Header().Values("Grpc-Previous-Rpc-Attempts"); v != nil {
				t.Fatalf("the caller's request gained grpc-previous-rpc-attempts %v", v)
			}
			if req.HTTPMethod() != http.MethodPost {
				t.Fatalf("request HTTP method %q, want POST", req.HTTPMethod())
			}
		})
	}
}

func TestHTTPGetRetried(t *testing.T) {
	srv := startServer(t, failFirst(2, connect.CodeUnavailable), false)
	i, err := connectretry.New(retryConfig(t, 4, `"UNAVAILABLE"`, ""), connectretry.WithClock(clocktest.NewAuto()))
	if err != nil {
		t.Fatal(err)
	}
	c := newClients(srv, connectProtocol, i, connect.WithHTTPGet(), connect.WithIdempotency(connect.IdempotencyNoSideEffects))
	req := connect.NewRequest(wrapperspb.String("q"))
	resp, err := c.unary.CallUnary(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.GetValue() != "q from attempt 3" || req.HTTPMethod() != http.MethodGet {
		t.Fatalf("response %q sent with %s, want the third attempt's, with GET", resp.Msg.GetValue(), req.HTTPMethod())
	}
	if got := srv.previous(unary); !slices.Equal(got, []int{-1, 1, 2}) {
		t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
	}
}

func TestCallInfoDescribesLastAttempt(t *testing.T) {
	srv := startServer(t, handlers{unary: func(_ context.Context, n int, _ *request) (*connect.Response[msg], error) {
		if n < 3 {
			e := connect.NewError(connect.CodeUnavailable, errors.New("again"))
			e.Meta().Set("Attempt", fmt.Sprint(n))
			return nil, e
		}
		resp := connect.NewResponse(&msg{})
		resp.Header().Set("Attempt", fmt.Sprint(n))
		return resp, nil
	}}, true)
	c, _ := dial(t, srv, protocols[1], retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	ctx, info := connect.NewClientContext(context.Background())
	info.RequestHeader().Set("X-From-Call-Info", "yes")
	if _, err := call(ctx, c.unary, "x"); err != nil {
		t.Fatal(err)
	}
	if got := info.ResponseHeader().Get("Attempt"); got != "3" {
		t.Fatalf("CallInfo response header Attempt %q, want 3", got)
	}
	for i, a := range srv.seen(unary) {
		if a.header.Get("X-From-Call-Info") != "yes" {
			t.Fatalf("attempt %d lacks the CallInfo's request header", i+1)
		}
	}
}

func TestPreviousAttempts(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   int
	}{
		{nil, 0}, {[]string{"2"}, 2}, {[]string{"-1"}, 0}, {[]string{"x"}, 0}, {[]string{"1", "2"}, 0},
	} {
		h := http.Header{}
		for _, v := range tc.values {
			h.Add("grpc-previous-rpc-attempts", v)
		}
		if got := connectretry.PreviousAttempts(h); got != tc.want {
			t.Errorf("PreviousAttempts(%v) = %d, want %d", tc.values, got, tc.want)
		}
	}
}

func FuzzPreviousAttempts(f *testing.F) {
	for _, s := range []string{"0", "1", "4", "-1", "+2", "007", "99999999999999999999", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{"Grpc-Previous-Rpc-Attempts": {v}}
		n := connectretry.PreviousAttempts(h)
		if n < 0 {
			t.Fatalf("PreviousAttempts(%q) = %d, want >= 0", v, n)
		}
		if n > 0 && strings.TrimLeft(strings.TrimPrefix(v, "+"), "0") != fmt.Sprint(n) {
			t.Fatalf("PreviousAttempts(%q) = %d, not the header's value", v, n)
		}
	})
}

// TestErrorPassedOn: a handler that returns the error of a call it made
// through the interceptor sends its own caller the last attempt's code and
// message, not the account of retrying that the error's text adds.
func TestErrorPassedOn(t *testing.T) {
	backend := startServer(t, failFirst(100, connect.CodeUnavailable), false)
	c, _ := dial(t, backend, connectProtocol, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	front := startServer(t, handlers{unary: func(ctx context.Context, _ int, req *request) (*connect.Response[msg], error) {
		return call(ctx, c.unary, req.Msg.GetValue())
	}}, false)
	_, err := call(context.Background(), connect.NewClient[msg, msg](front.client, front.url+unary), "x")
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || ce.Message() != "attempt 3 fails" {
		t.Fatalf("the front's caller got %v, want the backend's last error, unavailable: attempt 3 fails", err)
	}
	if backend.count(unary) != 3 {
		t.Fatalf("%d attempts at the backend, want 3", backend.count(unary))
	}
}
