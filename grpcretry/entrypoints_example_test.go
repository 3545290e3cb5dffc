package grpcretry_test

import (
	"context"
	"fmt"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	_ "google.golang.org/protobuf/types/known/emptypb" // registers google/protobuf/empty.proto

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// libraryService is the descriptor that generated code gives a service of
// library.proto, whose methods declare their idempotency_level:
//
//	service Library {
//	  rpc GetBook(...) returns (...) { option idempotency_level = NO_SIDE_EFFECTS; }
//	  rpc PutBook(...) returns (...) { option idempotency_level = IDEMPOTENT; }
//	  rpc CreateBook(...) returns (...);
//	  rpc WatchBooks(...) returns (stream ...) { option idempotency_level = NO_SIDE_EFFECTS; }
//	}
func libraryService() protoreflect.ServiceDescriptor {
	method := func(name string, level descriptorpb.MethodOptions_IdempotencyLevel, stream bool) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{
			Name: proto.String(name), InputType: proto.String(".google.protobuf.Empty"), OutputType: proto.String(".google.protobuf.Empty"),
			ServerStreaming: proto.Bool(stream), Options: &descriptorpb.MethodOptions{IdempotencyLevel: level.Enum()},
		}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("library/v1/library.proto"), Package: proto.String("library.v1"), Syntax: proto.String("proto3"),
		Dependency: []string{"google/protobuf/empty.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Library"), Method: []*descriptorpb.MethodDescriptorProto{
			method("GetBook", descriptorpb.MethodOptions_NO_SIDE_EFFECTS, false),
			method("PutBook", descriptorpb.MethodOptions_IDEMPOTENT, false),
			method("CreateBook", descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN, false),
			method("WatchBooks", descriptorpb.MethodOptions_NO_SIDE_EFFECTS, true),
		}}},
	}, protoregistry.GlobalFiles) // where google/protobuf/empty.proto is
	if err != nil {
		log.Fatal(err)
	}
	return fd.Services().ByName("Library")
}

// The service config that retries what AIP-194 lets a client retry: the
// unary methods a .proto file declares free of side effects or idempotent.
func ExampleAIP194Services() {
	// In your code: librarypb.File_library_v1_library_proto.Services().ByName("Library").
	cfg := grpcretry.AIP194Services(libraryService())
	for _, m := range []string{"GetBook", "PutBook", "CreateBook", "WatchBooks"} {
		mc := cfg.MethodConfig("/library.v1.Library/" + m)
		fmt.Println(m, mc != nil && mc.RetryPolicy != nil)
	}
	// Output:
	// GetBook true
	// PutBook true
	// CreateBook false
	// WatchBooks false
}

// countingServer fails every call with UNAVAILABLE and prints what
// PreviousAttempts says of each attempt.
type countingServer struct {
	testpb.UnimplementedTestServiceServer
}

func (countingServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	fmt.Println("attempts before this one:", grpcretry.PreviousAttempts(ctx))
	return nil, status.Error(codes.Unavailable, "busy")
}

// A handler learns how many attempts of a call came before the one it is
// serving (A6's grpc-previous-rpc-attempts), to log or shed retries apart.
func ExamplePreviousAttempts() {
	target, stop := serve(countingServer{})
	defer stop()
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(target, append(grpcretry.DialOptions(cfg),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	_, err = testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{})
	fmt.Println(status.Code(err))
	// Output:
	// attempts before this one: 0
	// attempts before this one: 1
	// attempts before this one: 2
	// attempts before this one: 3
	// Unavailable
}

// One call may narrow its policy: here, to a single attempt.
func ExampleOverride() {
	target, stop := serve(&flakyServer{failures: 100})
	defer stop()
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(target, append(grpcretry.DialOptions(cfg),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	var n int
	_, err = client.UnaryCall(context.Background(), &testpb.SimpleRequest{},
		grpcretry.Override(rebound.Override{MaxAttempts: 1}), grpcretry.CountAttempts(&n))
	fmt.Println(status.Code(err), "after", n, "attempt")
	_, err = client.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpcretry.CountAttempts(&n))
	fmt.Println(status.Code(err), "after", n, "attempts")
	// Output:
	// Unavailable after 1 attempt
	// Unavailable after 4 attempts
}
