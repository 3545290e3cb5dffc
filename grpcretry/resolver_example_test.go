package grpcretry_test

import (
	"context"
	"fmt"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
)

// A service owner changes the retry policy of every client by publishing
// a new service config where the clients resolve the service's name: in
// DNS, a TXT record; here, a manual resolver standing in for any custom
// one. Calls after the update run under the new policy, with no
// redeploy.
func ExampleWithResolver() {
	addr, stop := serve(&flakyServer{failures: 1 << 30}) // always UNAVAILABLE
	defer stop()
	policy := func(maxAttempts int) string {
		return fmt.Sprintf(`{"methodConfig": [{
		  "name": [{"service": "grpc.testing.TestService"}],
		  "retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
		    "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`, maxAttempts)
	}
	r := manual.NewBuilderWithScheme("example")
	r.BuildCallback = func(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) {
		r.InitialState(resolver.State{
			Addresses:     []resolver.Address{{Addr: addr}},
			ServiceConfig: cc.ParseServiceConfig(policy(2)),
		})
	}

	// No config in code: the resolver's applies.
	conn, err := grpc.NewClient("example:///api",
		append(grpcretry.DialOptions(nil, grpcretry.WithResolver(r)), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	call := func() {
		var attempts int
		_, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpcretry.CountAttempts(&attempts))
		fmt.Println(status.Code(err), "after", attempts, "attempts")
	}

	call()
	// The service owner publishes a new policy.
	r.UpdateState(resolver.State{
		Addresses:     []resolver.Address{{Addr: addr}},
		ServiceConfig: r.CC().ParseServiceConfig(policy(4)),
	})
	call()
	// Output:
	// Unavailable after 2 attempts
	// Unavailable after 4 attempts
}
