package connectretry_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestIdempotent(t *testing.T) {
	for _, tc := range []struct {
		stream connect.StreamType
		level  connect.IdempotencyLevel
		want   bool
	}{
		{connect.StreamTypeUnary, connect.IdempotencyNoSideEffects, true},
		{connect.StreamTypeUnary, connect.IdempotencyIdempotent, true},
		{connect.StreamTypeUnary, connect.IdempotencyUnknown, false},
		{connect.StreamTypeServer, connect.IdempotencyNoSideEffects, false},
		{connect.StreamTypeClient, connect.IdempotencyIdempotent, false},
		{connect.StreamTypeBidi, connect.IdempotencyIdempotent, false},
	} {
		if got := connectretry.Idempotent(connect.Spec{StreamType: tc.stream, IdempotencyLevel: tc.level}); got != tc.want {
			t.Errorf("Idempotent(%v, %v) = %v, want %v", tc.stream, tc.level, got, tc.want)
		}
	}
}

// checkRetried reports which of the procedures cfg retries with the
// AIP-194 policy.
func checkRetried(t *testing.T, cfg *serviceconfig.Config, want map[string]bool) {
	t.Helper()
	for procedure, retried := range want {
		mc := cfg.MethodConfig(procedure)
		if got := mc != nil && mc.RetryPolicy != nil; got != retried {
			t.Errorf("%s: retried %v, want %v", procedure, got, retried)
			continue
		}
		if retried && mc.RetryPolicy.RetryableStatusCodes != serviceconfig.NewCodeSet(serviceconfig.Unavailable) {
			t.Errorf("%s: retryable codes %v, want [UNAVAILABLE]", procedure, mc.RetryPolicy.RetryableStatusCodes)
		}
	}
}

func TestAIP194(t *testing.T) {
	cfg, err := connectretry.AIP194(
		connect.Spec{Procedure: "/a.v1.S/Get", StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyNoSideEffects},
		connect.Spec{Procedure: "/a.v1.S/Delete", StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyIdempotent},
		connect.Spec{Procedure: "/a.v1.S/Delete", StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyIdempotent},
		connect.Spec{Procedure: "/a.v1.S/Create", StreamType: connect.StreamTypeUnary},
		connect.Spec{Procedure: "/a.v1.S/Watch", StreamType: connect.StreamTypeServer, IdempotencyLevel: connect.IdempotencyNoSideEffects},
	)
	if err != nil {
		t.Fatal(err)
	}
	checkRetried(t, cfg, map[string]bool{"/a.v1.S/Get": true, "/a.v1.S/Delete": true, "/a.v1.S/Create": false, "/a.v1.S/Watch": false})
	if n := len(cfg.MethodConfigs[0].Names); n != 2 {
		t.Errorf("%d names, want 2 without duplicates", n)
	}

	if cfg, err := connectretry.AIP194(connect.Spec{Procedure: "/a.v1.S/Create"}); err != nil || len(cfg.MethodConfigs) != 0 {
		t.Errorf("nothing safe to retry: %v, %v; want an empty config", cfg, err)
	}
	for _, bad := range []string{"a.v1.S/Get", "/a.v1.S", "/a.v1.S/", "//Get", "/a/b/c"} {
		_, err := connectretry.AIP194(connect.Spec{Procedure: "/a.v1.S/Get"}, connect.Spec{Procedure: bad})
		if err == nil || !strings.Contains(err.Error(), "specs[1].Procedure") {
			t.Errorf("procedure %q: err %v, want one naming specs[1].Procedure", bad, err)
		}
	}
}

func TestAIP194Services(t *testing.T) {
	method := func(name string, level descriptorpb.MethodOptions_IdempotencyLevel, serverStreaming bool) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{
			Name:            proto.String(name),
			InputType:       proto.String(".google.protobuf.StringValue"),
			OutputType:      proto.String(".google.protobuf.StringValue"),
			ServerStreaming: proto.Bool(serverStreaming),
			Options:         &descriptorpb.MethodOptions{IdempotencyLevel: level.Enum()},
		}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:       proto.String("rebound/test/v1/aip194.proto"),
		Package:    proto.String("rebound.test.v1"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/wrappers.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Library"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("GetBook", descriptorpb.MethodOptions_NO_SIDE_EFFECTS, false),
				method("PutBook", descriptorpb.MethodOptions_IDEMPOTENT, false),
				method("CreateBook", descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN, false),
				method("WatchBooks", descriptorpb.MethodOptions_NO_SIDE_EFFECTS, true),
			},
		}},
	}, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	cfg := connectretry.AIP194Services(fd.Services().ByName("Library"))
	checkRetried(t, cfg, map[string]bool{
		"/rebound.test.v1.Library/GetBook":    true,
		"/rebound.test.v1.Library/PutBook":    true,
		"/rebound.test.v1.Library/CreateBook": false,
		"/rebound.test.v1.Library/WatchBooks": false,
	})
}

func TestAIP194Retries(t *testing.T) {
	srv := startServer(t, failFirst(1, connect.CodeUnavailable), false)
	cfg, err := connectretry.AIP194(connect.Spec{Procedure: unary, StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyIdempotent})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := dial(t, srv, connectProtocol, cfg)
	if _, err := call(context.Background(), c.unary, "x"); err != nil || srv.count(unary) != 2 {
		t.Fatalf("err %v after %d attempts, want success after 2", err, srv.count(unary))
	}
}
