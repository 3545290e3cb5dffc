package grpcretry

import (
	"encoding/json"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/serviceconfig"
)

// invalidOptionsName is the load-balancing policy through which
// [DialOptions] makes grpc.NewClient fail when an option is invalid:
// grpc-go parses the default service config when the conn is made, and
// reports the error of a policy's config parser as the conn's. No conn is
// ever built with it.
const invalidOptionsName = "rebound_invalid_options"

func init() { balancer.Register(invalidOptions{}) }

// invalidOptions is the policy whose config is an option's error.
type invalidOptions struct{}

func (invalidOptions) Name() string { return invalidOptionsName }

// Build is not called in practice: ParseConfig fails for every config, so
// grpc-go never chooses the policy. Should it be, it behaves as pick_first.
func (invalidOptions) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	return balancer.Get("pick_first").Build(cc, opts)
}

// ParseConfig returns the error the config carries.
func (invalidOptions) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var c struct{ Error string }
	if err := json.Unmarshal(js, &c); err != nil || c.Error == "" {
		return nil, errors.New("grpcretry: invalid options")
	}
	return nil, errors.New(c.Error)
}

// failNewClient returns the dial option that makes grpc.NewClient fail with
// err.
func failNewClient(err error) grpc.DialOption {
	js, _ := json.Marshal(map[string]any{
		"loadBalancingConfig": []any{map[string]any{invalidOptionsName: map[string]string{"error": err.Error()}}},
	})
	return grpc.WithDefaultServiceConfig(string(js))
}
