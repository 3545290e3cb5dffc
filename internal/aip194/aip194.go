// Package aip194 builds, from protobuf service descriptors, the service
// config that retries what AIP-194 lets a client retry automatically: the
// unary methods declared free of side effects or idempotent in their
// idempotency_level option. grpcretry and connectretry export it as
// AIP194Services.
package aip194

import (
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rebound-go/rebound/serviceconfig"
)

// Services returns the service config of [Config] for every method of
// services that is unary and declares the idempotency level
// NO_SIDE_EFFECTS or IDEMPOTENT.
func Services(services ...protoreflect.ServiceDescriptor) *serviceconfig.Config {
	var names []serviceconfig.Name
	for _, sd := range services {
		methods := sd.Methods()
		for j := range methods.Len() {
			md := methods.Get(j)
			if md.IsStreamingClient() || md.IsStreamingServer() {
				continue
			}
			opts, _ := md.Options().(*descriptorpb.MethodOptions)
			switch opts.GetIdempotencyLevel() {
			case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
				names = append(names, serviceconfig.Name{Service: string(sd.FullName()), Method: string(md.Name())})
			}
		}
	}
	return Config(names)
}

// Config returns the service config whose one method config is
// serviceconfig.AIP194 of names, or an empty config for no names.
func Config(names []serviceconfig.Name) *serviceconfig.Config {
	if len(names) == 0 {
		return &serviceconfig.Config{}
	}
	return &serviceconfig.Config{MethodConfigs: []serviceconfig.MethodConfig{serviceconfig.AIP194(names...)}}
}
