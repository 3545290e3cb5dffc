package grpcretry

import (
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"

	"github.com/rebound-go/rebound/serviceconfig"
)

// grpcServiceConfig returns the dial option that hands grpc-go the parts
// of cfg that grpc-go acts on and rebound does not: the load-balancing
// policy (rebound_distinct, for one, which sends hedges to distinct
// backends) and health checking. The methodConfig and retryThrottling stay
// out: rebound applies them itself, and grpc-go's parser rejects configs
// that A6 allows, such as lower-case status codes. ok is false when cfg has
// none of these fields.
func grpcServiceConfig(cfg *serviceconfig.Config) (opt grpc.DialOption, ok bool) {
	if cfg.LoadBalancingPolicy == "" && cfg.LoadBalancingConfig == nil && cfg.HealthCheckConfig == nil {
		return nil, false
	}
	js, err := grpcConfigJSON(cfg)
	if err != nil {
		return failNewClient(err.Error()), true
	}
	return grpc.WithDefaultServiceConfig(string(js)), true
}

// grpcConfigJSON returns the parts of cfg that grpc-go acts on (see
// grpcServiceConfig) as a service config, "{}" when there are none.
func grpcConfigJSON(cfg *serviceconfig.Config) ([]byte, error) {
	sc := map[string]any{}
	if cfg.LoadBalancingPolicy != "" {
		sc["loadBalancingPolicy"] = cfg.LoadBalancingPolicy
	}
	if cfg.LoadBalancingConfig != nil {
		sc["loadBalancingConfig"] = cfg.LoadBalancingConfig
	}
	if cfg.HealthCheckConfig != nil {
		sc["healthCheckConfig"] = cfg.HealthCheckConfig
	}
	js, err := json.Marshal(sc)
	if err != nil { // only a Config built by hand holds a RawMessage that is not JSON
		return nil, fmt.Errorf("grpcretry: the service config's loadBalancingConfig or healthCheckConfig is not JSON: %w", err)
	}
	return js, nil
}
