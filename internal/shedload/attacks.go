package shedload

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// attackerDialer dials from AttackerIP.
var attackerDialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: AttackerIP}}

// An Attack is what a hostile client does beside the honest ones, for
// [Scenario.Attack]. Each returns once its context is done and has let go
// of every connection it made.

// Every makes n calls of mode at once, every period, from one client
// without retries at AttackerIP, each within timeout (0: none): 5
// unauthenticated calls a second, a burst of quota refusals, a call whose
// deadline is 2ms.
func Every(period time.Duration, n int, mode string, timeout time.Duration) func(context.Context, *Server) {
	return func(ctx context.Context, s *Server) {
		c, err := s.NewCaller(-1, 1, AttackerIP)
		if err != nil {
			return
		}
		defer c.Close()
		tick := time.NewTicker(period)
		defer tick.Stop()
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			for range n {
				wg.Go(func() {
					cctx, cancel := ctx, context.CancelFunc(func() {})
					if timeout > 0 {
						cctx, cancel = context.WithTimeout(ctx, timeout)
					}
					defer cancel()
					c.Call(cctx, mode)
				})
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}
}

// IdleStreams opens n streams that send nothing and holds them until its
// context is done: over conns gRPC connections to StreamingInputCall; for
// Connect and HTTP, n HTTP/1.1 requests to the upload route whose bodies
// never come.
func IdleStreams(n, conns int) func(context.Context, *Server) {
	return func(ctx context.Context, s *Server) {
		if s.Protocol == GRPC {
			idleGRPC(ctx, s, n, conns)
			return
		}
		slowUploads(ctx, s, n, 0)
	}
}

// SlowUploads starts n uploads of a body of size bytes to the upload
// route, each of which sends one byte and then nothing, until its context
// is done (HTTP and Connect; gRPC: as IdleStreams over 4 connections).
func SlowUploads(n, size int) func(context.Context, *Server) {
	return func(ctx context.Context, s *Server) {
		if s.Protocol == GRPC {
			idleGRPC(ctx, s, n, 4)
			return
		}
		slowUploads(ctx, s, n, size)
	}
}

func idleGRPC(ctx context.Context, s *Server, n, conns int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range max(conns, 1) {
		cc, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return attackerDialer.DialContext(ctx, "tcp", addr)
			}))
		if err != nil {
			return
		}
		defer cc.Close()
		client := testpb.NewTestServiceClient(cc)
		per := n / max(conns, 1)
		if i < n%max(conns, 1) {
			per++
		}
		for range per {
			wg.Go(func() {
				st, err := client.StreamingInputCall(ctx)
				if err != nil {
					return
				}
				<-ctx.Done()
				_, _ = st.CloseAndRecv()
			})
		}
	}
	<-ctx.Done()
}

// slowUploads: n requests with a body of size bytes (0: streamed, of no
// stated length), each of which sends at most one byte.
func slowUploads(ctx context.Context, s *Server, n, size int) {
	tr := &http.Transport{MaxIdleConnsPerHost: -1, DialContext: attackerDialer.DialContext}
	defer tr.CloseIdleConnections()
	url, contentType := s.URL+"/upload", "application/octet-stream"
	if s.Protocol == Connect {
		url, contentType = s.URL+UploadProcedure, "application/connect+proto"
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for range n {
		wg.Go(func() {
			pr, pw := io.Pipe()
			// The transport's writer waits on the body: end it with the
			// attack.
			defer context.AfterFunc(ctx, func() { pw.CloseWithError(context.Canceled) })()
			defer pw.Close()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", contentType)
			if size > 0 {
				req.ContentLength = int64(size)
				go func() { _, _ = pw.Write([]byte{0}) }()
			}
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
		})
	}
	<-ctx.Done()
}
