package grpcretry

import (
	"encoding/json"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	grpcsc "google.golang.org/grpc/serviceconfig"
)

// dialErrorName is the load-balancing policy through which [DialOptions]
// makes grpc.NewClient fail. A dial option cannot return an error, and of
// the errors grpc.NewClient returns only one carries text of the caller's:
// that of the default service config, which grpc-go parses when the conn
// is made, reporting a policy's config error as
//
//	grpc: the provided default service config is invalid: error parsing config for policy "grpcretry.DialOptions": <text>
//
// So the policy is named for where the error comes from, and the text says
// what it is. No conn is ever built with it.
const dialErrorName = "grpcretry.DialOptions"

func init() { balancer.Register(dialError{}) }

// dialError is the policy whose config is the text of DialOptions' error.
type dialError struct{}

func (dialError) Name() string { return dialErrorName }

// Build is not called in practice: ParseConfig fails for every config, so
// grpc-go never chooses the policy. Should it be, it behaves as pick_first.
func (dialError) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	return balancer.Get("pick_first").Build(cc, opts)
}

// ParseConfig returns the error the config carries.
func (dialError) ParseConfig(js json.RawMessage) (grpcsc.LoadBalancingConfig, error) {
	var c struct{ Error string }
	if err := json.Unmarshal(js, &c); err != nil || c.Error == "" {
		return nil, errors.New("grpcretry: invalid options")
	}
	return nil, errors.New(c.Error)
}

// failNewClient returns the dial option that makes grpc.NewClient fail with
// an error that ends with msg.
func failNewClient(msg string) grpc.DialOption {
	js, _ := json.Marshal(map[string]any{
		"loadBalancingConfig": []any{map[string]any{dialErrorName: map[string]string{"error": msg}}},
	})
	return grpc.WithDefaultServiceConfig(string(js))
}
