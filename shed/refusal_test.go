package shed_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/shed"
)

// limit100 is a Shedder whose limit starts at 100.
func limit100(t *testing.T) *shed.Shedder {
	c := shed.DefaultConfig()
	c.InitialLimit = 100
	s, err := shed.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A handler's own failures with a sign of overload neither shrink the
// limit (a quota aimed at one client, a missing shard, a dependency
// failing fast say nothing of the server's capacity) nor go out without
// a pushback: one that carries none gets the Shedder's, by the rule for
// what it sheds; one that carries its own keeps it. ReportOverload is how
// a handler says the server itself is overloaded.
func TestHandlerRefusalsGRPC(t *testing.T) {
	s := limit100(t)
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		switch string(req.GetPayload().GetBody()) {
		case "quota":
			return nil, status.Error(codes.ResourceExhausted, "quota")
		case "shard":
			return nil, status.Error(codes.Unavailable, "no such shard")
		case "own":
			_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "250"))
			return nil, status.Error(codes.Unavailable, "busy")
		case "info":
			st, _ := status.New(codes.Unavailable, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)})
			return nil, st.Err()
		case "overload":
			if !shed.ReportOverload(ctx) {
				return nil, status.Error(codes.Internal, "no Shedder in the context")
			}
			return nil, status.Error(codes.Unavailable, "pool full")
		}
		return &testpb.SimpleResponse{}, nil
	}}, grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()))
	client := testpb.NewTestServiceClient(srv.Dial(t))
	call := func(body string, want codes.Code) []string {
		t.Helper()
		var md metadata.MD
		_, err := client.UnaryCall(context.Background(), grpctest.Request(body), grpc.Trailer(&md))
		if status.Code(err) != want {
			t.Fatalf("%s: %v, want %v", body, err, want)
		}
		return md["grpc-retry-pushback-ms"]
	}
	for range 30 {
		call("ok", codes.OK)
	}
	for _, body := range []string{"quota", "shard"} {
		pb := call(body, map[string]codes.Code{"quota": codes.ResourceExhausted, "shard": codes.Unavailable}[body])
		if ms, err := strconv.Atoi(pb[0]); len(pb) != 1 || err != nil || ms < 0 {
			t.Errorf("%s: pushback %q, want a delay (1 or 2 of 32 calls failed)", body, pb)
		}
	}
	if got := call("own", codes.Unavailable); len(got) != 1 || got[0] != "250" {
		t.Errorf("the handler's own pushback went out as %q, want [250]", got)
	}
	if got := call("info", codes.Unavailable); got != nil {
		t.Errorf("a failure with a RetryInfo got the pushback %q, want none", got)
	}
	if st := s.Stats(); st.Limit != 100 || st.Refused != 2 {
		t.Fatalf("after the refusals: %+v, want the limit still 100, 2 refusals spoken for", st)
	}
	call("overload", codes.Unavailable)
	if got := s.Stats().Limit; got != 90 {
		t.Fatalf("limit %d after ReportOverload, want 90", got)
	}
	// Once more than a tenth of the last second's calls failed so, the
	// pushback says stop.
	for range 5 {
		call("shard", codes.Unavailable)
	}
	if got := call("shard", codes.Unavailable); len(got) != 1 || got[0] != "-1" {
		t.Errorf("pushback %q with 8 of 41 calls failing, want [-1]", got)
	}
}

// errBusy is returned by every failing call, as handlers do with a
// package-level error: the Shedder must not write its pushback into it.
var errBusy = connect.NewError(connect.CodeUnavailable, errors.New("dependency down"))

func TestHandlerRefusalsConnect(t *testing.T) {
	s := limit100(t)
	const greet = "/acme.v1.Greeter/Greet"
	mux := http.NewServeMux()
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			switch req.Msg.GetValue() {
			case "busy":
				return nil, errBusy
			case "own":
				e := connect.NewError(connect.CodeResourceExhausted, errors.New("quota"))
				e.Meta().Set("Grpc-Retry-Pushback-Ms", "250")
				return nil, e
			case "overload":
				shed.ReportOverload(ctx)
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("pool full"))
			}
			return connect.NewResponse(wrapperspb.String("hi")), nil
		}, connect.WithInterceptors(s.ConnectInterceptor())))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+greet)
	call := func(v string) *connect.Error {
		t.Helper()
		_, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String(v)))
		var ce *connect.Error
		if v != "ok" && !errors.As(err, &ce) {
			t.Fatalf("%s: %v", v, err)
		}
		return ce
	}
	for range 30 {
		call("ok")
	}
	ce := call("busy")
	if ms, err := strconv.Atoi(ce.Meta().Get("Grpc-Retry-Pushback-Ms")); ce.Code() != connect.CodeUnavailable || ce.Message() != "dependency down" || err != nil || ms < 0 {
		t.Errorf("a handler's unavailable went out as %v with pushback %q, want its code and message and a delay", ce, ce.Meta().Get("Grpc-Retry-Pushback-Ms"))
	}
	if got := errBusy.Meta().Get("Grpc-Retry-Pushback-Ms"); got != "" {
		t.Errorf("the handler's error value got the pushback %q", got)
	}
	if ce := call("own"); ce.Meta().Values("Grpc-Retry-Pushback-Ms")[0] != "250" || len(ce.Meta().Values("Grpc-Retry-Pushback-Ms")) != 1 {
		t.Errorf("the handler's own pushback went out as %q, want [250]", ce.Meta().Values("Grpc-Retry-Pushback-Ms"))
	}
	if st := s.Stats(); st.Limit != 100 || st.Refused != 1 {
		t.Fatalf("%+v, want the limit still 100 and 1 refusal spoken for", st)
	}
	call("overload")
	if got := s.Stats().Limit; got != 90 {
		t.Fatalf("limit %d after ReportOverload, want 90", got)
	}
}

func TestHandlerRefusalsHTTP(t *testing.T) {
	s := limit100(t)
	srv := httptest.NewServer(s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("do") {
		case "quota":
			w.WriteHeader(http.StatusTooManyRequests)
		case "down":
			http.Error(w, "dependency down", http.StatusServiceUnavailable)
		case "own":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "overload":
			shed.ReportOverload(r.Context())
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})))
	defer srv.Close()
	get := func(do string) *http.Response {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + "?do=" + do)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for range 30 {
		get("ok")
	}
	for _, do := range []string{"quota", "down"} {
		resp := get(do)
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 0 || ra > 1 {
			t.Errorf("%s: %d with Retry-After %q, want a delay of under a second, in whole seconds", do, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if got := get("own").Header.Values("Retry-After"); len(got) != 1 || got[0] != "7" {
		t.Errorf("the handler's own Retry-After went out as %q, want [7]", got)
	}
	if st := s.Stats(); st.Limit != 100 || st.Refused != 2 {
		t.Fatalf("%+v, want the limit still 100 and 2 refusals spoken for", st)
	}
	get("overload")
	if got := s.Stats().Limit; got != 90 {
		t.Fatalf("limit %d after ReportOverload, want 90", got)
	}
}

// A stream handler's own pushback, set on the stream or through
// grpc.SetTrailer on its context, goes out alone; one without gets the
// Shedder's.
func TestStreamRefusals(t *testing.T) {
	s := limit100(t)
	srv := grpctest.Start(t, grpctest.Handlers{
		Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			return &testpb.SimpleResponse{}, nil
		},
		ServerStream: func(_ int, req *testpb.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			switch string(req.GetPayload().GetBody()) {
			case "stream":
				st.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", "250"))
			case "context":
				_ = grpc.SetTrailer(st.Context(), metadata.Pairs("grpc-retry-pushback-ms", "250"))
			}
			return status.Error(codes.Unavailable, "busy")
		},
	}, grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(s.StreamServerInterceptor()))
	client := testpb.NewTestServiceClient(srv.Dial(t))
	for range 30 {
		if _, err := client.UnaryCall(context.Background(), grpctest.Request("ok")); err != nil {
			t.Fatal(err)
		}
	}
	for _, body := range []string{"stream", "context", "none"} {
		st, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(body)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("%s: %v", body, err)
		}
		got := st.Trailer()["grpc-retry-pushback-ms"]
		if body != "none" && (len(got) != 1 || got[0] != "250") {
			t.Errorf("%s: pushback %q, want the handler's [250]", body, got)
		}
		if ms, err := strconv.Atoi(got[0]); body == "none" && (len(got) != 1 || err != nil || ms < 0) {
			t.Errorf("%s: pushback %q, want the Shedder's delay", body, got)
		}
	}
}
