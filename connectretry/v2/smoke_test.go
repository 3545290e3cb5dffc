package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectinprocess"
	"google.golang.org/protobuf/types/known/wrapperspb"

	connectretry "github.com/rebound-go/rebound/connectretry/v2"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestSmoke(t *testing.T) {
	var n atomic.Int32
	srv := connect.NewServer()
	unarySpec := connect.Spec{Procedure: "/t.S/U", StreamType: connect.StreamTypeUnary}
	bidiSpec := connect.Spec{Procedure: "/t.S/B", StreamType: connect.StreamTypeBidi}
	srv.Register(connect.Method{Spec: unarySpec, Handler: func(ctx context.Context, _ connect.Spec, st connect.ServerStream) error {
		var req wrapperspb.StringValue
		if err := st.Receive(&req); err != nil {
			return err
		}
		if n.Add(1) < 3 {
			return connect.NewError(connect.CodeUnavailable, "busy")
		}
		info, _ := connect.CallInfoForServerContext(ctx)
		return st.Send(wrapperspb.String(req.GetValue() + " " + fmt.Sprint(connectretry.PreviousAttempts(ctx)) + info.RequestHeader().Get("X-A")))
	}}, connect.Method{Spec: bidiSpec, Handler: func(ctx context.Context, _ connect.Spec, st connect.ServerStream) error {
		var got []string
		for {
			var m wrapperspb.StringValue
			if err := st.Receive(&m); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return err
			}
			got = append(got, m.GetValue())
		}
		if n.Add(1) < 3 {
			return connect.NewError(connect.CodeUnavailable, "busy")
		}
		return st.Send(wrapperspb.String(fmt.Sprint(got)))
	}})
	cfg, err := serviceconfig.Parse([]byte(`{"methodConfig":[{"name":[{"service":"t.S"}],"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.01s","maxBackoff":"0.01s","backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	connecthttp.Mount(mux, srv)
	hs := httptest.NewUnstartedServer(mux)
	hs.EnableHTTP2 = true
	hs.StartTLS()
	defer hs.Close()
	for name, tr := range map[string]connect.Transport{
		"inprocess": connectinprocess.New(srv),
		"http":      connecthttp.NewTransport(hs.Client(), hs.URL),
		"grpc":      connecthttp.NewTransport(hs.Client(), hs.URL, connecthttp.WithGRPC()),
	} {
		t.Run(name, func(t *testing.T) {
			n.Store(0)
			c := connect.NewClient(tr, connectretry.NewInterceptor(cfg).WrapClient)
			var attempts int
			ctx, info := connect.NewClientContext(connectretry.CountAttempts(context.Background(), &attempts))
			info.RequestHeader().Set("X-A", "!")
			var res wrapperspb.StringValue
			if err := c.CallUnary(ctx, unarySpec, wrapperspb.String("hi"), &res); err != nil {
				t.Fatal(err)
			}
			if res.GetValue() != "hi 2!" || attempts != 3 {
				t.Fatalf("got %q after %d attempts", res.GetValue(), attempts)
			}
			n.Store(0)
			st, err := c.CallClientStream(context.Background(), bidiSpec)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{"a", "b", "c"} {
				if err := st.Send(wrapperspb.String(v)); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if err := st.Receive(&res); err != nil {
				t.Fatal(err)
			}
			if res.GetValue() != "[a b c]" {
				t.Fatalf("bidi got %q", res.GetValue())
			}
			if err := st.Receive(&res); !errors.Is(err, io.EOF) {
				t.Fatalf("end: %v", err)
			}
			_ = st.Close()
		})
	}
}
