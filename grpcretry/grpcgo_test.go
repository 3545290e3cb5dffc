package grpcretry_test

// The scenarios of grpc-go's own retry tests (test/retry_test.go), run
// through grpcretry: each test below is named after the grpc-go test it
// reproduces, with the same server script and the same expectations,
// except where the package doc lists a deliberate difference (a comment
// says which). TestRetryTransparentWhenCommitted is
// TestStreamCancelledWhileRetryOpens in a6_audit_test.go. grpc-go's
// configs spell fields "MaxAttempts" and durations ".01s"; A6's spellings
// are used here.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// grpcGoConfig is the retry policy of grpc-go's tests: maxAttempts, 10 ms
// backoff, the given retryable codes, and extra top-level fields.
func grpcGoConfig(t testing.TB, maxAttempts int, codes, extra string) *serviceconfig.Config {
	t.Helper()
	return parseConfig(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"waitForReady":true,"retryPolicy":{
		"maxAttempts":%d,"initialBackoff":"0.01s","maxBackoff":"0.01s","backoffMultiplier":1,
		"retryableStatusCodes":[%s]}}]%s}`, grpctest.Service, maxAttempts, codes, extra))
}

// grpcGoClient dials srv through a Client of cfg whose backoff waits on a
// fake clock that fires at once and records each wait.
func grpcGoClient(t *testing.T, srv *grpctest.Server, cfg *serviceconfig.Config, opts ...grpcretry.Option) (testpb.TestServiceClient, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.NewAuto()
	c, err := grpcretry.New(cfg, append([]grpcretry.Option{grpcretry.WithClock(clk), grpcretry.WithServerName(serverName(srv))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...)), clk
}

func TestGRPCGoRetryUnary(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(_ context.Context, n int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		switch n - 1 {
		case 0, 2, 5:
			return &testpb.SimpleResponse{}, nil
		case 6, 8, 11:
			return nil, status.Error(codes.Internal, "non-retryable error")
		}
		return nil, status.Error(codes.AlreadyExists, "retryable error")
	}})
	tc, _ := grpcGoClient(t, srv, grpcGoConfig(t, 4, `"ALREADY_EXISTS"`, ""))
	for i, want := range []struct {
		code  codes.Code
		count int // the server's attempt index after the call, from 0
	}{
		{codes.OK, 0}, {codes.OK, 2}, {codes.OK, 5},
		{codes.Internal, 6}, {codes.Internal, 8}, {codes.Internal, 11},
		{codes.AlreadyExists, 15},
	} {
		_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"))
		if status.Code(err) != want.code || srv.Count(grpctest.UnaryCall)-1 != want.count {
			t.Fatalf("call %d: %v, server at %d; want %v at %d", i, err, srv.Count(grpctest.UnaryCall)-1, want.code, want.count)
		}
	}
}

func TestGRPCGoRetryThrottling(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(_ context.Context, n int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		switch n - 1 {
		case 0, 3, 6, 10, 11, 12, 13, 14, 16, 18:
			return &testpb.SimpleResponse{}, nil
		}
		return nil, status.Error(codes.Unavailable, "retryable error")
	}})
	tc, _ := grpcGoClient(t, srv, grpcGoConfig(t, 4, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":10,"tokenRatio":0.5}`))
	for i, want := range []struct {
		code  codes.Code
		count int
	}{
		{codes.OK, 0},           // tokens = 10
		{codes.OK, 3},           // tokens = 8.5 (10 - 2 failures + 0.5 success)
		{codes.OK, 6},           // tokens = 6
		{codes.Unavailable, 8},  // tokens = 5: the first attempt is retried, the second not
		{codes.Unavailable, 9},  // tokens = 4
		{codes.OK, 10},          // tokens = 4.5
		{codes.OK, 11},          // tokens = 5
		{codes.OK, 12},          // tokens = 5.5
		{codes.OK, 13},          // tokens = 6
		{codes.OK, 14},          // tokens = 6.5
		{codes.OK, 16},          // tokens = 5.5
		{codes.Unavailable, 17}, // tokens = 4.5
	} {
		_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"))
		if status.Code(err) != want.code || srv.Count(grpctest.UnaryCall)-1 != want.count {
			t.Errorf("call %d: %v, server at %d; want %v at %d", i, err, srv.Count(grpctest.UnaryCall)-1, want.code, want.count)
		}
	}
}

type (
	bidiServer = grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]
	bidiClient = grpc.BidiStreamingClient[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]
	serverOp   func(bidiServer) error
	clientOp   func(bidiClient) error
)

func TestGRPCGoRetryStreaming(t *testing.T) {
	req := func(b byte) *testpb.StreamingOutputCallRequest {
		return &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte{b}}}
	}
	res := func(b byte) *testpb.StreamingOutputCallResponse {
		return &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte{b}}}
	}
	largePayload := &testpb.Payload{Type: testpb.PayloadType_COMPRESSABLE, Body: make([]byte, 500)}

	sAttempts := func(n int) serverOp {
		return func(st bidiServer) error {
			md, _ := metadata.FromIncomingContext(st.Context())
			if got := md["grpc-previous-rpc-attempts"]; len(got) != 1 || got[0] != strconv.Itoa(n) {
				return status.Errorf(codes.Internal, "server: metadata = %v; want grpc-previous-rpc-attempts %d", md, n)
			}
			return nil
		}
	}
	sReqPayload := func(p *testpb.Payload) serverOp {
		return func(st bidiServer) error {
			want := &testpb.StreamingOutputCallRequest{Payload: p}
			if got, err := st.Recv(); err != nil || !proto.Equal(got, want) {
				return status.Errorf(codes.Internal, "server: Recv() = %v, %v; want %v, <nil>", got, err, want)
			}
			return nil
		}
	}
	sReq := func(b byte) serverOp { return sReqPayload(req(b).Payload) }
	sHdr := func() serverOp {
		return func(st bidiServer) error { return st.SendHeader(metadata.Pairs("test_header", "test_value")) }
	}
	sRes := func(b byte) serverOp {
		return func(st bidiServer) error {
			if err := st.Send(res(b)); err != nil {
				return status.Errorf(codes.Internal, "server: Send() = %v", err)
			}
			return nil
		}
	}
	sErr := func(c codes.Code) serverOp {
		return func(bidiServer) error { return status.Error(c, "this is a test error") }
	}
	sCloseSend := func() serverOp {
		return func(st bidiServer) error {
			if msg, err := st.Recv(); msg != nil || err != io.EOF {
				return status.Errorf(codes.Internal, "server: Recv() = %v, %v; want <nil>, io.EOF", msg, err)
			}
			return nil
		}
	}
	sPushback := func(s string) serverOp {
		return func(st bidiServer) error {
			st.SetTrailer(metadata.MD{"grpc-retry-pushback-ms": []string{s}})
			return nil
		}
	}

	cReqPayload := func(p *testpb.Payload) clientOp {
		return func(st bidiClient) error {
			if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: p}); err != nil {
				return fmt.Errorf("client: Send() = %v; want <nil>", err)
			}
			return nil
		}
	}
	cReq := func(b byte) clientOp { return cReqPayload(req(b).Payload) }
	cRes := func(b byte) clientOp {
		return func(st bidiClient) error {
			if got, err := st.Recv(); err != nil || !proto.Equal(got, res(b)) {
				return fmt.Errorf("client: Recv() = %v, %v; want %v, <nil>", got, err, res(b))
			}
			return nil
		}
	}
	cErr := func(c codes.Code) clientOp {
		return func(st bidiClient) error {
			got, err := st.Recv()
			code := status.Code(err)
			if err == io.EOF {
				code = codes.OK
			}
			if got != nil || code != c {
				return fmt.Errorf("client: Recv() = %v, %v; want <nil>, %v", got, err, c)
			}
			return nil
		}
	}
	cCloseSend := func() clientOp {
		return func(st bidiClient) error {
			if err := st.CloseSend(); err != nil {
				return fmt.Errorf("client: CloseSend() = %v; want <nil>", err)
			}
			return nil
		}
	}
	cHdr := func() clientOp {
		return func(st bidiClient) error {
			if _, err := st.Header(); err != nil && err != io.EOF {
				return err
			}
			return nil
		}
	}
	cCtx := func() clientOp {
		return func(st bidiClient) error {
			st.Context()
			return nil
		}
	}
	// The backoff waits on a fake clock: cGetTime marks how many waits
	// were made so far, cCheckElapsed sums the waits since.
	var (
		clk   *clocktest.Clock
		since int
	)
	cGetTime := func() clientOp {
		return func(bidiClient) error {
			since = len(clk.Sleeps())
			return nil
		}
	}
	cCheckElapsed := func(d time.Duration) clientOp {
		return func(bidiClient) error {
			var waited time.Duration
			for _, s := range clk.Sleeps()[since:] {
				waited += s
			}
			if waited < d {
				return fmt.Errorf("waited %v; want >= %v", waited, d)
			}
			return nil
		}
	}

	for _, tc := range []struct {
		desc      string
		serverOps []serverOp
		clientOps []clientOp
	}{{
		desc:      "Non-retryable error code",
		serverOps: []serverOp{sReq(1), sErr(codes.Internal)},
		clientOps: []clientOp{cReq(1), cErr(codes.Internal)},
	}, {
		desc:      "One retry necessary",
		serverOps: []serverOp{sReq(1), sErr(codes.Unavailable), sReq(1), sAttempts(1), sRes(1)},
		clientOps: []clientOp{cReq(1), cRes(1), cErr(codes.OK)},
	}, {
		desc: "Exceed max attempts (4); check attempts header on server",
		serverOps: []serverOp{
			sReq(1), sErr(codes.Unavailable),
			sReq(1), sAttempts(1), sErr(codes.Unavailable),
			sAttempts(2), sReq(1), sErr(codes.Unavailable),
			sAttempts(3), sReq(1), sErr(codes.Unavailable),
		},
		clientOps: []clientOp{cReq(1), cErr(codes.Unavailable)},
	}, {
		desc: "Multiple requests",
		serverOps: []serverOp{
			sReq(1), sReq(2), sErr(codes.Unavailable),
			sReq(1), sReq(2), sRes(5),
		},
		clientOps: []clientOp{cReq(1), cReq(2), cRes(5), cErr(codes.OK)},
	}, {
		desc: "Multiple successive requests",
		serverOps: []serverOp{
			sReq(1), sErr(codes.Unavailable),
			sReq(1), sReq(2), sErr(codes.Unavailable),
			sReq(1), sReq(2), sReq(3), sRes(5),
		},
		clientOps: []clientOp{cReq(1), cReq(2), cReq(3), cRes(5), cErr(codes.OK)},
	}, {
		desc: "No retry after receiving",
		serverOps: []serverOp{
			sReq(1), sErr(codes.Unavailable),
			sReq(1), sRes(3), sErr(codes.Unavailable),
		},
		clientOps: []clientOp{cReq(1), cRes(3), cErr(codes.Unavailable)},
	}, {
		desc:      "Retry via ClientStream.Header()",
		serverOps: []serverOp{sReq(1), sErr(codes.Unavailable), sReq(1), sAttempts(1)},
		clientOps: []clientOp{cReq(1), cHdr(), cErr(codes.OK)},
	}, {
		desc:      "No retry after header",
		serverOps: []serverOp{sReq(1), sHdr(), sErr(codes.Unavailable)},
		clientOps: []clientOp{cReq(1), cHdr(), cErr(codes.Unavailable)},
	}, {
		// A deliberate difference (package doc): stream.Context() does not
		// commit the stream, because A6 names only two commit points; grpc-go
		// ends this stream UNAVAILABLE after one attempt.
		desc:      "Retry after context",
		serverOps: []serverOp{sReq(1), sErr(codes.Unavailable), sReq(1), sAttempts(1)},
		clientOps: []clientOp{cReq(1), cCtx(), cErr(codes.OK)},
	}, {
		desc: "Replaying close send",
		serverOps: []serverOp{
			sReq(1), sReq(2), sCloseSend(), sErr(codes.Unavailable),
			sReq(1), sReq(2), sCloseSend(), sRes(1), sRes(3), sRes(5),
		},
		clientOps: []clientOp{cReq(1), cReq(2), cCloseSend(), cRes(1), cRes(3), cRes(5), cErr(codes.OK)},
	}, {
		desc:      "Negative server pushback - no retry",
		serverOps: []serverOp{sReq(1), sPushback("-1"), sErr(codes.Unavailable)},
		clientOps: []clientOp{cReq(1), cErr(codes.Unavailable)},
	}, {
		desc:      "Non-numeric server pushback - no retry",
		serverOps: []serverOp{sReq(1), sPushback("xxx"), sErr(codes.Unavailable)},
		clientOps: []clientOp{cReq(1), cErr(codes.Unavailable)},
	}, {
		desc:      "Multiple server pushback values - no retry",
		serverOps: []serverOp{sReq(1), sPushback("100"), sPushback("10"), sErr(codes.Unavailable)},
		clientOps: []clientOp{cReq(1), cErr(codes.Unavailable)},
	}, {
		desc:      "1s server pushback - delayed retry",
		serverOps: []serverOp{sReq(1), sPushback("1000"), sErr(codes.Unavailable), sReq(1), sRes(2)},
		clientOps: []clientOp{cGetTime(), cReq(1), cRes(2), cCheckElapsed(time.Second), cErr(codes.OK)},
	}, {
		desc:      "Overflowing buffer - no retry",
		serverOps: []serverOp{sReqPayload(largePayload), sErr(codes.Unavailable)},
		clientOps: []clientOp{cReqPayload(largePayload), cErr(codes.Unavailable)},
	}} {
		t.Run(tc.desc, func(t *testing.T) {
			// As in grpc-go, each attempt runs the ops left over from the
			// attempt before it, holding the lock: attempts run one by one.
			var (
				mu   sync.Mutex
				next int
			)
			srv := grpctest.Start(t, grpctest.Handlers{Bidi: func(_ int, st bidiServer) error {
				mu.Lock()
				defer mu.Unlock()
				for next < len(tc.serverOps) {
					op := tc.serverOps[next]
					next++
					if err := op(st); err != nil {
						return err
					}
				}
				return nil
			}})
			// grpc.MaxRetryRPCBufferSize(200) in grpc-go's test.
			var client testpb.TestServiceClient
			client, clk = grpcGoClient(t, srv, grpcGoConfig(t, 4, `"UNAVAILABLE"`, ""), grpcretry.WithBufferLimits(rebound.DefaultBufferTotal, 200))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := client.FullDuplexCall(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for j, op := range tc.clientOps {
				if err := op(st); err != nil {
					t.Fatalf("client op %d: %v", j, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if next != len(tc.serverOps) {
				t.Fatalf("server ran %d ops, want %d", next, len(tc.serverOps))
			}
		})
	}
}

// grpc-go's TestMaxCallAttempts, with WithMaxAttemptsCap for
// grpc.WithMaxCallAttempts. A deliberate difference: grpc-go takes a
// client maximum below 1 to mean its default of 5, where WithMaxAttemptsCap
// rejects it (every invalid option is an error); leaving the option out
// gives the default of 5.
func TestGRPCGoMaxCallAttempts(t *testing.T) {
	for _, tc := range []struct {
		service, client, want int // client 0: no WithMaxAttemptsCap
	}{
		{9, 4, 4},
		{9, 7, 7},
		{3, 10, 3},
		{8, 0, 5},
		{3, 0, 3},
	} {
		t.Run(fmt.Sprintf("service %d client %d", tc.service, tc.client), func(t *testing.T) {
			srv := grpctest.Start(t, grpctest.Handlers{
				Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
					return nil, status.Error(codes.Unavailable, "this is a test error")
				},
				Bidi: func(int, bidiServer) error { return status.Error(codes.Unavailable, "this is a test error") },
			})
			var opts []grpcretry.Option
			if tc.client != 0 {
				opts = append(opts, grpcretry.WithMaxAttemptsCap(tc.client))
			}
			client, _ := grpcGoClient(t, srv, grpcGoConfig(t, tc.service, `"UNAVAILABLE"`, ""), opts...)
			st, err := client.FullDuplexCall(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); status.Code(err) != codes.Unavailable || !errors.Is(err, rebound.ErrAttemptsExhausted) {
				t.Fatalf("stream: %v; want UNAVAILABLE, attempts exhausted", err)
			}
			if got := srv.Count(grpctest.FullDuplexCall); got != tc.want {
				t.Fatalf("stream: %d attempts, want %d", got, tc.want)
			}
			if _, err := client.UnaryCall(context.Background(), grpctest.Request("x")); status.Code(err) != codes.Unavailable || !errors.Is(err, rebound.ErrAttemptsExhausted) {
				t.Fatalf("unary: %v; want UNAVAILABLE, attempts exhausted", err)
			}
			if got := srv.Count(grpctest.UnaryCall); got != tc.want {
				t.Fatalf("unary: %d attempts, want %d", got, tc.want)
			}
		})
	}
	for _, n := range []int{0, -1} {
		if _, err := grpcretry.New(nil, grpcretry.WithMaxAttemptsCap(n)); err == nil {
			t.Errorf("WithMaxAttemptsCap(%d) accepted", n)
		}
	}
}

// grpc-go's TestNoRetry: with retries disabled, or no policy, a failure
// is returned after one attempt as the attempt's own status, without
// "retries exhausted".
func TestGRPCGoNoRetry(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(t *testing.T) *serviceconfig.Config
		opts []grpcretry.Option
	}{
		{"disabled", func(t *testing.T) *serviceconfig.Config { return grpcGoConfig(t, 4, `"UNAVAILABLE"`, "") }, []grpcretry.Option{grpcretry.WithRetriesDisabled()}},
		{"not_configured", func(*testing.T) *serviceconfig.Config { return nil }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpctest.Start(t, grpctest.Handlers{
				Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
					return nil, status.Error(codes.Unavailable, "retryable error")
				},
				Bidi: func(int, bidiServer) error { return status.Error(codes.Unavailable, "retryable error") },
			})
			client, _ := grpcGoClient(t, srv, tc.cfg(t), tc.opts...)
			st, err := client.FullDuplexCall(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			var ge *rebound.Error
			if status.Code(err) != codes.Unavailable || errors.As(err, &ge) || srv.Count(grpctest.FullDuplexCall) != 1 {
				t.Fatalf("stream: %v after %d attempts; want grpc-go's UNAVAILABLE after 1", err, srv.Count(grpctest.FullDuplexCall))
			}
			_, err = client.UnaryCall(context.Background(), grpctest.Request("x"))
			if status.Code(err) != codes.Unavailable || errors.As(err, &ge) || srv.Count(grpctest.UnaryCall) != 1 {
				t.Fatalf("unary: %v after %d attempts; want grpc-go's UNAVAILABLE after 1", err, srv.Count(grpctest.UnaryCall))
			}
		})
	}
}

// h2Script plays grpc-go's httpServer of TestRetryStats on one listener:
// once the client has ended a stream, stream 1 of a connection is refused
// (RST_STREAM REFUSED_STREAM, so the server never processed it and grpc-go
// retries it transparently on the same connection), and every later
// stream gets the next response: header blocks and messages.
type h2Script struct {
	responses []h2Response
	wg        sync.WaitGroup
}

type h2Response struct {
	headers  [][]string // header blocks before the messages, as name, value, ...
	payloads [][]byte
	trailers [][]string // the last block ends the stream
}

func (s *h2Script) serve(t *testing.T, lis net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.conn(c)
			}()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		s.wg.Wait()
	})
}

func (s *h2Script) conn(c net.Conn) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return
	}
	var (
		buf  bytes.Buffer
		enc  = hpack.NewEncoder(&buf)
		next int
	)
	block := func(kv []string) []byte {
		buf.Reset()
		for i := 0; i < len(kv); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return bytes.Clone(buf.Bytes())
	}
	// Every stream is answered once the client has ended it, so that the
	// client has sent (and reported) its message first.
	respond := func(id uint32) error {
		if id == 1 {
			return fr.WriteRSTStream(1, http2.ErrCodeRefusedStream)
		}
		if next >= len(s.responses) {
			return fr.WriteRSTStream(id, http2.ErrCodeInternal)
		}
		r := s.responses[next]
		next++
		for _, h := range r.headers {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(h), EndHeaders: true}); err != nil {
				return err
			}
		}
		for _, p := range r.payloads {
			if err := fr.WriteData(id, false, p); err != nil {
				return err
			}
		}
		for i, h := range r.trailers {
			end := i == len(r.trailers)-1
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block(h), EndHeaders: true, EndStream: end}); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				err = fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				err = respond(f.StreamID)
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				err = respond(f.StreamID)
			}
		}
		if err != nil {
			return
		}
	}
}

// statsRecorder is the retryStatsHandler of grpc-go's TestRetryStats.
type statsRecorder struct {
	mu sync.Mutex
	s  []stats.RPCStats
}

func (*statsRecorder) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h *statsRecorder) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.DelayedPickComplete); ok { // comes nondeterministically
		return
	}
	h.mu.Lock()
	h.s = append(h.s, s)
	h.mu.Unlock()
}
func (*statsRecorder) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (*statsRecorder) HandleConn(context.Context, stats.ConnStats)                       {}

// grpc-go's TestRetryStats: an application's stats handler sees the same
// events through grpcretry as under grpc-go's own retries: the refused
// attempt, grpc-go's transparent retry of it (which fails with pushback),
// then rebound's retry after the pushback's 10 ms, a new attempt rather
// than a transparent one. The 10 ms are checked on the fake clock.
func TestGRPCGoRetryStats(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	script := &h2Script{responses: []h2Response{{
		trailers: [][]string{{
			":status", "200",
			"content-type", "application/grpc",
			"grpc-status", "14", // UNAVAILABLE
			"grpc-message", "unavailable retry",
			"grpc-retry-pushback-ms", "10",
		}},
	}, {
		headers:  [][]string{{":status", "200", "content-type", "application/grpc"}},
		payloads: [][]byte{{0, 0, 0, 0, 0}}, // an empty message
		trailers: [][]string{{"grpc-status", "0"}},
	}}}
	script.serve(t, lis)
	cfg := parseConfig(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":4,"initialBackoff":"0.01s","maxBackoff":"0.01s","backoffMultiplier":1,
		"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service))
	clk := clocktest.NewAuto()
	c, err := grpcretry.New(cfg, grpcretry.WithClock(clk), grpcretry.WithServerName(fmt.Sprint("stats-", lis.Addr())))
	if err != nil {
		t.Fatal(err)
	}
	handler := &statsRecorder{}
	cc, err := grpc.NewClient(lis.Addr().String(), append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(handler))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := testpb.NewTestServiceClient(cc).EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	const method = "/grpc.testing.TestService/EmptyCall"
	want := []stats.RPCStats{
		&stats.Begin{},
		&stats.OutHeader{FullMethod: method},
		&stats.OutPayload{WireLength: 5},
		&stats.End{},

		&stats.Begin{IsTransparentRetryAttempt: true},
		&stats.OutHeader{FullMethod: method},
		&stats.OutPayload{WireLength: 5},
		&stats.InTrailer{Trailer: metadata.Pairs("content-type", "application/grpc", "grpc-retry-pushback-ms", "10")},
		&stats.End{},

		&stats.Begin{},
		&stats.OutHeader{FullMethod: method},
		&stats.OutPayload{WireLength: 5},
		&stats.InHeader{},
		&stats.InPayload{WireLength: 5},
		&stats.InTrailer{},
		&stats.End{},
	}
	handler.mu.Lock()
	defer handler.mu.Unlock()
	got := handler.s
	if len(got) != len(want) {
		var types []string
		for _, s := range got {
			types = append(types, fmt.Sprintf("%T", s))
		}
		t.Fatalf("%d events, want %d: %v", len(got), len(want), types)
	}
	// Within an attempt, what the caller's goroutine reports (OutHeader,
	// OutPayload) and what grpc-go's transport reader reports (InHeader,
	// InPayload, InTrailer) interleave as the two goroutines run; and, as
	// grpc-go's test allows, a message and the trailer after it may be
	// reported in either order. Each attempt's events are put in the order
	// of want, after checking the order that is fixed: headers before
	// messages, on each side.
	rank := func(s stats.RPCStats) int {
		switch s.(type) {
		case *stats.Begin:
			return 0
		case *stats.OutHeader:
			return 1
		case *stats.OutPayload:
			return 2
		case *stats.InHeader:
			return 3
		case *stats.InPayload:
			return 4
		case *stats.InTrailer:
			return 5
		}
		return 6 // End
	}
	for start := 0; start < len(got); {
		end := start + 1
		for end < len(got) && rank(got[end]) != 0 {
			end++
		}
		attempt := got[start:end]
		at := func(r int) int {
			return slices.IndexFunc(attempt, func(s stats.RPCStats) bool { return rank(s) == r })
		}
		if m := at(2); m >= 0 && m < at(1) {
			t.Fatalf("attempt at event %d: OutPayload before OutHeader", start)
		}
		if m := at(4); m >= 0 && m < at(3) {
			t.Fatalf("attempt at event %d: InPayload before InHeader", start)
		}
		slices.SortStableFunc(attempt, func(a, b stats.RPCStats) int { return rank(a) - rank(b) })
		start = end
	}
	for i := range got {
		w, s := want[i], got[i]
		if reflect.TypeOf(w) != reflect.TypeOf(s) {
			t.Fatalf("event %d: %T, want %T", i, s, w)
		}
		wv, sv := reflect.ValueOf(w).Elem(), reflect.ValueOf(s).Elem()
		if !sv.FieldByName("Client").Bool() {
			t.Fatalf("event %d: Client false", i)
		}
		for f := 0; f < wv.NumField(); f++ {
			if !wv.Field(f).IsZero() && !reflect.DeepEqual(sv.Field(f).Interface(), wv.Field(f).Interface()) {
				t.Fatalf("event %d, %s: %v, want %v", i, wv.Type().Field(f).Name, sv.Field(f).Interface(), wv.Field(f).Interface())
			}
		}
		if b, ok := w.(*stats.Begin); ok && !b.IsTransparentRetryAttempt && s.(*stats.Begin).IsTransparentRetryAttempt {
			t.Fatalf("event %d: a transparent retry, want an attempt of rebound's", i)
		}
	}
	if sleeps := clk.Sleeps(); !reflect.DeepEqual(sleeps, []time.Duration{10 * time.Millisecond}) {
		t.Fatalf("waits %v, want the pushback's 10ms", sleeps)
	}
}

// authorityPicker is the authorityOverridePicker of grpc-go's
// TestAuthorityOverrideNotReusedAcrossAttempts: every pick before the
// server has seen an attempt overrides the authority (gRFC A81), later
// picks do not.
type authorityPicker struct {
	sc        balancer.SubConn
	authority string
	attempts  *atomic.Int32
}

func (p *authorityPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	res := balancer.PickResult{SubConn: p.sc}
	if p.attempts.Load() == 0 {
		res.Metadata = metadata.Pairs(":authority", p.authority)
	}
	return res, nil
}

type authorityBalancer struct {
	cc       balancer.ClientConn
	sc       balancer.SubConn
	attempts *atomic.Int32
}

func (b *authorityBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	if b.sc != nil || len(s.ResolverState.Addresses) == 0 {
		return nil
	}
	var sc balancer.SubConn
	//lint:ignore SA1019 grpc-go's own test builds its SubConn so, with the one address the deprecation asks for.
	sc, err := b.cc.NewSubConn(s.ResolverState.Addresses[:1], balancer.NewSubConnOptions{
		StateListener: func(st balancer.SubConnState) {
			b.cc.UpdateState(balancer.State{ConnectivityState: st.ConnectivityState,
				Picker: &authorityPicker{sc: sc, authority: "picked-endpoint.example.com", attempts: b.attempts}})
		},
	})
	if err != nil {
		return err
	}
	b.sc = sc
	sc.Connect()
	return nil
}

func (*authorityBalancer) ResolverError(error)                                        {}
func (*authorityBalancer) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (*authorityBalancer) ExitIdle()                                                  {}
func (b *authorityBalancer) Close() {
	if b.sc != nil {
		b.sc.Shutdown()
	}
}

type authorityBuilder struct {
	name     string
	attempts *atomic.Int32
}

func (b authorityBuilder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &authorityBalancer{cc: cc, attempts: b.attempts}
}
func (b authorityBuilder) Name() string { return b.name }

var authorityBalancers atomic.Int64

// grpc-go's TestAuthorityOverrideNotReusedAcrossAttempts: an authority
// the picker gives one attempt is not reused by rebound's retry, whose
// pick gives none.
func TestGRPCGoAuthorityOverrideNotReusedAcrossAttempts(t *testing.T) {
	const wantAuthority = "test.server"
	var (
		attempts    atomic.Int32
		mu          sync.Mutex
		authorities []string
	)
	name := fmt.Sprint("rebound-authority-override-", authorityBalancers.Add(1))
	balancer.Register(authorityBuilder{name: name, attempts: &attempts})
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		authorities = append(authorities, md.Get(":authority")...)
		mu.Unlock()
		if attempts.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "forcing a retry")
		}
		return &testpb.SimpleResponse{}, nil
	}})
	r := manual.NewBuilderWithScheme("whatever")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: srv.Addr}}})
	cfg := parseConfig(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":2,"initialBackoff":"0.01s","maxBackoff":"0.01s","backoffMultiplier":1,
		"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service))
	c, err := grpcretry.New(cfg, grpcretry.WithClock(clocktest.NewAuto()), grpcretry.WithServerName(name))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(r.Scheme()+":///"+wantAuthority, append(c.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}]}`, name)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"picked-endpoint.example.com", wantAuthority}; !reflect.DeepEqual(authorities, want) {
		t.Fatalf("authorities %q, want %q", authorities, want)
	}
}
