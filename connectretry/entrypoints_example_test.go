package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	_ "google.golang.org/protobuf/types/known/emptypb" // registers google/protobuf/empty.proto
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
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

// The service config that retries what AIP-194 lets a client retry, read
// from the idempotency_level each method of a .proto file declares.
func ExampleAIP194Services() {
	// In your code: librarypb.File_library_v1_library_proto.Services().ByName("Library").
	cfg := connectretry.AIP194Services(libraryService())
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

// Whether a procedure may be sent more than once, from its spec: what
// AIP194 retries.
func ExampleIdempotent() {
	for _, spec := range []connect.Spec{
		{Procedure: "/library.v1.Library/GetBook", StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyNoSideEffects},
		{Procedure: "/library.v1.Library/CreateBook", StreamType: connect.StreamTypeUnary},
		{Procedure: "/library.v1.Library/WatchBooks", StreamType: connect.StreamTypeServer, IdempotencyLevel: connect.IdempotencyNoSideEffects},
	} {
		fmt.Println(spec.Procedure, connectretry.Idempotent(spec))
	}
	// Output:
	// /library.v1.Library/GetBook true
	// /library.v1.Library/CreateBook false
	// /library.v1.Library/WatchBooks false
}

// A handler learns how many attempts of a call came before the one it is
// serving (A6's grpc-previous-rpc-attempts), to log or shed retries apart.
func ExamplePreviousAttempts() {
	mux := http.NewServeMux()
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			fmt.Println("attempts before this one:", connectretry.PreviousAttempts(req.Header()))
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("busy"))
		}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+greet,
		connect.WithInterceptors(connectretry.NewInterceptor(cfg)))
	_, err = client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("rebound")))
	fmt.Println(connect.CodeOf(err))
	// Output:
	// attempts before this one: 0
	// attempts before this one: 1
	// attempts before this one: 2
	// attempts before this one: 3
	// unavailable
}

// One call may narrow its policy through its context: here, to a single
// attempt.
func ExampleOverride() {
	url, stop := serveGreeter(100)
	defer stop()
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](http.DefaultClient, url+greet,
		connect.WithInterceptors(connectretry.NewInterceptor(cfg)))

	var n int
	ctx := connectretry.CountAttempts(context.Background(), &n)
	_, err = client.CallUnary(connectretry.Override(ctx, rebound.Override{MaxAttempts: 1}), connect.NewRequest(wrapperspb.String("rebound")))
	fmt.Println(connect.CodeOf(err), "after", n, "attempt")
	_, err = client.CallUnary(ctx, connect.NewRequest(wrapperspb.String("rebound")))
	fmt.Println(connect.CodeOf(err), "after", n, "attempts")
	// Output:
	// unavailable after 1 attempt
	// unavailable after 4 attempts
}
