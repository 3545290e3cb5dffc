package grpcretry

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rebound-go/rebound/internal/aip194"
	"github.com/rebound-go/rebound/serviceconfig"
)

// AIP194Services returns a service config that retries, as AIP-194
// recommends, the methods of services that may be sent more than once:
// the unary ones that declare, in their idempotency_level option, that
// they have no side effects (NO_SIDE_EFFECTS) or are IDEMPOTENT. The other
// methods get no policy, so they are made once. The policy is
// [serviceconfig.AIP194]: UNAVAILABLE only, up to 5 attempts, backoff
// bounds 0.1s, 0.2s, 0.4s, 0.8s. Set RetryThrottling on the result to add
// throttling. It is connectretry.AIP194Services, for grpc-go: the
// descriptors come from the generated code of the service's .proto file.
//
//	cfg := grpcretry.AIP194Services(pingv1.File_ping_v1_ping_proto.Services().ByName("PingService"))
//	conn, err := grpc.NewClient(target, append(grpcretry.DialOptions(cfg), creds)...)
func AIP194Services(services ...protoreflect.ServiceDescriptor) *serviceconfig.Config {
	return aip194.Services(services...)
}
