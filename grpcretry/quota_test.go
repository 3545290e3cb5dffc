package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/internal/quotatest"
)

// quotaMD is the fields of q as gRPC metadata: lower-case keys.
func quotaMD(fields map[string]string) metadata.MD {
	md := metadata.MD{}
	for k, v := range fields {
		md.Set(strings.ToLower(k), v)
	}
	return md
}

// TestRateLimitQuotaPaces: as httpretry's, over gRPC, unary calls and
// server streams: a server that allows 15 calls in each 3s window and
// publishes what is left in its response metadata (ratelimit and
// ratelimit-policy for unary calls, x-ratelimit-* for streams) refuses
// nothing of four callers that loop for 4s (3.5s with -short, see
// quotatest.PacedRun) with WithRateLimitQuota (on a
// busy machine until it has served 15, within 20s), and serves at least
// 15; without it, the server refuses some (the callers stop at its first
// refusal).
func TestRateLimitQuotaPaces(t *testing.T) {
	t.Parallel()
	for _, shape := range []string{"unary", "server stream"} {
		for _, on := range []bool{true, false} {
			if !on && shape != "unary" {
				continue
			}
			name := shape
			if !on {
				name += " without the option"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				f := quotatest.IETF
				if shape != "unary" {
					f = quotatest.X
				}
				q := &quotatest.Quota{Limit: 15, Window: 3 * time.Second, Family: f}
				take := func(ctx context.Context) error {
					ok, fields, _ := q.Take(time.Now())
					if err := grpc.SetHeader(ctx, quotaMD(fields)); err != nil {
						return err
					}
					if !ok {
						return status.Error(codes.ResourceExhausted, "quota spent")
					}
					return nil
				}
				srv := grpctest.Start(t, grpctest.Handlers{
					Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
						return &testpb.SimpleResponse{}, take(ctx)
					},
					ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
						if err := take(s.Context()); err != nil {
							return err
						}
						return s.Send(&testpb.StreamingOutputCallResponse{})
					},
				})
				opts := []grpcretry.Option{grpcretry.WithServerName(fmt.Sprint("quota-", t.Name(), time.Now().UnixNano())),
					grpcretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})}
				if on {
					opts = append(opts, grpcretry.WithRateLimitQuota())
				}
				c, err := grpcretry.New(nil, opts...)
				if err != nil {
					t.Fatal(err)
				}
				tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
				start := time.Now()
				var failed atomic.Int64
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						for !q.Enough(on, start, quotatest.PacedRun(testing.Short())) && time.Since(start) < 20*time.Second {
							ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
							var err error
							if shape == "unary" {
								_, err = tc.UnaryCall(ctx, grpctest.Request("x"))
							} else if st, oerr := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}); oerr != nil {
								err = oerr
							} else {
								for err == nil {
									_, err = st.Recv()
								}
								if errors.Is(err, io.EOF) {
									err = nil
								}
							}
							if err != nil {
								failed.Add(1)
							}
							cancel()
						}
					})
				}
				wg.Wait()
				t.Logf("server saw %d, refused %d; %d calls failed in the client", q.Seen(), q.Refused(), failed.Load())
				switch {
				case on && (q.Refused() != 0 || q.Seen()-q.Refused() < 15):
					t.Errorf("with the quota read: the server saw %d and refused %d, want none refused and at least 15 served", q.Seen(), q.Refused())
				case !on && q.Refused() == 0:
					t.Errorf("without the option the server refused nothing of %d", q.Seen())
				}
			})
		}
	}
}
