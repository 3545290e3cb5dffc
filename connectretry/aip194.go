package connectretry

import (
	"fmt"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

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
	return spec.StreamType == connect.StreamTypeUnary &&
		(spec.IdempotencyLevel == connect.IdempotencyNoSideEffects || spec.IdempotencyLevel == connect.IdempotencyIdempotent)
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
	var names []serviceconfig.Name
	for i, spec := range specs {
		name, ok := procedureName(spec.Procedure)
		if !ok {
			return nil, fmt.Errorf("connectretry: AIP194: specs[%d].Procedure %q is not of the form /pkg.Service/Method", i, spec.Procedure)
		}
		if Idempotent(spec) && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return aip194.Config(names), nil
}

// AIP194Services is [AIP194] for every method of services, with the
// idempotency level each declares in its idempotency_level option, as
// generated code does; grpcretry.AIP194Services is the same function.
//
//	cfg := connectretry.AIP194Services(pingv1.File_ping_v1_ping_proto.Services().ByName("PingService"))
func AIP194Services(services ...protoreflect.ServiceDescriptor) *serviceconfig.Config {
	return aip194.Services(services...)
}

// procedureName splits "/pkg.Service/Method".
func procedureName(procedure string) (serviceconfig.Name, bool) {
	s, ok := strings.CutPrefix(procedure, "/")
	if !ok {
		return serviceconfig.Name{}, false
	}
	service, method, ok := strings.Cut(s, "/")
	if !ok || service == "" || method == "" || strings.Contains(method, "/") {
		return serviceconfig.Name{}, false
	}
	return serviceconfig.Name{Service: service, Method: method}, true
}
