package grpcretry_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// testService returns a descriptor of the test service whose UnaryCall
// declares the idempotency level unary, and whose server stream declares
// NO_SIDE_EFFECTS, as generated code carries it.
func testService(t *testing.T, unary descriptorpb.MethodOptions_IdempotencyLevel) protoreflect.ServiceDescriptor {
	t.Helper()
	method := func(name, in, out string, level descriptorpb.MethodOptions_IdempotencyLevel, serverStreaming bool) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{
			Name:            proto.String(name),
			InputType:       proto.String(in),
			OutputType:      proto.String(out),
			ServerStreaming: proto.Bool(serverStreaming),
			Options:         &descriptorpb.MethodOptions{IdempotencyLevel: level.Enum()},
		}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:       proto.String("rebound/test/aip194.proto"),
		Package:    proto.String("grpc.testing"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"grpc/testing/messages.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("TestService"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("UnaryCall", ".grpc.testing.SimpleRequest", ".grpc.testing.SimpleResponse", unary, false),
				method("StreamingOutputCall", ".grpc.testing.StreamingOutputCallRequest", ".grpc.testing.StreamingOutputCallResponse",
					descriptorpb.MethodOptions_NO_SIDE_EFFECTS, true),
			},
		}},
	}, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Services().ByName("TestService")
}

// TestAIP194Services: a unary method declared idempotent is retried on
// UNAVAILABLE, one of unknown idempotency is made once, and a stream gets
// no policy whatever it declares.
func TestAIP194Services(t *testing.T) {
	for _, tc := range []struct {
		level descriptorpb.MethodOptions_IdempotencyLevel
		want  int
	}{
		{descriptorpb.MethodOptions_IDEMPOTENT, 2},
		{descriptorpb.MethodOptions_NO_SIDE_EFFECTS, 2},
		{descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN, 1},
	} {
		t.Run(tc.level.String(), func(t *testing.T) {
			cfg := grpcretry.AIP194Services(testService(t, tc.level))
			if mc := cfg.MethodConfig(grpctest.StreamingOutputCall); mc != nil && mc.RetryPolicy != nil {
				t.Fatal("a server stream got a retry policy")
			}
			srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
			c, _ := client(t, srv, cfg)
			_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
			if got := srv.Count(grpctest.UnaryCall); got != tc.want || (tc.want == 2) != (err == nil) {
				t.Fatalf("%d attempts, err %v; want %d attempts", got, err, tc.want)
			}
		})
	}
}
