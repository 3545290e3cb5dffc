package connectretry

import (
	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rebound-go/rebound/connectretry/internal/engine"
	"github.com/rebound-go/rebound/internal/aip194"
	"github.com/rebound-go/rebound/serviceconfig"
)

// Idempotent reports whether calls of spec may be sent more than once, so
// that AIP-194 lets them be retried automatically: a unary procedure
// declared free of side effects (connect.IdempotencyNoSideEffects) or
// idempotent (connect.IdempotencyIdempotent). Streams, and procedures of
// unknown idempotency, are not: running them twice may change state twice.
// It is httpretry.Idempotent for a connect procedure.
func Idempotent(spec connect.Spec) bool {
	return engine.Idempotent(spec.StreamType == connect.StreamTypeUnary, int32(spec.IdempotencyLevel))
}

// AIP194 returns a service config that retries, as AIP-194 recommends, the
// procedures among specs that [Idempotent] accepts, and leaves the others
// without a policy, so they are made once. Only Procedure, StreamType and
// IdempotencyLevel of a spec are read. The policy is
// [serviceconfig.AIP194]: UNAVAILABLE only, up to 5 attempts, backoff
// bounds 0.1s, 0.2s, 0.4s, 0.8s. Set RetryThrottling on the result to add
// throttling.
//
// A procedure must have the form "/pkg.Service/Method"; AIP194 reports the
// first that does not.
func AIP194(specs ...connect.Spec) (*serviceconfig.Config, error) {
	procs := make([]engine.Procedure, len(specs))
	for i, spec := range specs {
		procs[i] = engine.Procedure{Name: spec.Procedure, Unary: spec.StreamType == connect.StreamTypeUnary, Level: int32(spec.IdempotencyLevel)}
	}
	return engine.AIP194(procs)
}

// AIP194Services is [AIP194] for every method of services, with the
// idempotency level each declares in its idempotency_level option, as
// generated code does; grpcretry.AIP194Services is the same function.
//
//	cfg := connectretry.AIP194Services(pingv1.File_ping_v1_ping_proto.Services().ByName("PingService"))
func AIP194Services(services ...protoreflect.ServiceDescriptor) *serviceconfig.Config {
	return aip194.Services(services...)
}
