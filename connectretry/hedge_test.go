package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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

// untraced is an HTTPClient that calls no httptrace hook: its requests go
// out on a context that hides the caller's trace.
type untraced struct{ connect.HTTPClient }

func (c untraced) Do(r *http.Request) (*http.Response, error) {
	return c.HTTPClient.Do(r.WithContext(hideTrace{r.Context()}))
}

// hideTrace hides the httptrace.ClientTrace of its context, whose key
// httptrace does not export.
type hideTrace struct{ context.Context }

func (c hideTrace) Value(key any) any {
	if reflect.TypeOf(key).PkgPath() == "net/http/httptrace" {
		return nil
	}
	return c.Context.Value(key)
}

// TestHedgedServerStreamOverUntracedClient: over an HTTPClient that calls
// no httptrace hook, the attempts of a hedged server stream make their
// requests one after the other, each once the one before it has its
// response headers (see the package documentation). The two attempts are
// due at once; whichever makes its request first reaches the server
// first, gets its headers and hangs until it is cancelled; the other
// reaches the server only after those headers were sent, and wins.
func TestHedgedServerStreamOverUntracedClient(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var flushed, early atomic.Bool
			srv := startServer(t, handlers{serverStream: func(ctx context.Context, n int, _ *request, st *connect.ServerStream[msg]) error {
				if n == 1 {
					flushed.Store(true)
					if err := st.Conn().Send(nil); err != nil {
						return err
					}
					<-ctx.Done()
					return ctx.Err()
				}
				if !flushed.Load() {
					early.Store(true)
				}
				return st.Send(wrapperspb.String("ok"))
			}}, p.http2)
			i, err := connectretry.New(hedgeConfig(t, 2, "0s", `"UNAVAILABLE"`, ""), connectretry.WithClock(clocktest.New()))
			if err != nil {
				t.Fatal(err)
			}
			client := connect.NewClient[msg, msg](untraced{srv.client}, srv.url+serverStream, append([]connect.ClientOption{connect.WithInterceptors(i)}, p.opts...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := client.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("x")))
			if err != nil {
				t.Fatal(err)
			}
			if !st.Receive() || st.Msg().GetValue() != "ok" {
				t.Fatalf("received %q, %v; want the hedge's message", st.Msg().GetValue(), st.Err())
			}
			_ = st.Close()
			if early.Load() {
				t.Fatal("the second attempt reached the server before the first one's response headers were sent")
			}
			if got := srv.previous(serverStream); !slices.Equal(slices.Sorted(slices.Values(got)), []int{-1, 1}) {
				t.Fatalf("server saw grpc-previous-rpc-attempts %v, want absent and 1", got)
			}
		})
	}
}
