package distinct_test

import (
	"testing"

	"google.golang.org/grpc/balancer"

	"github.com/rebound-go/rebound/grpcretry/distinct"
)

// TestRegistered: importing the package alone registers the policy under
// the Name it exports, which is the name service configs use.
func TestRegistered(t *testing.T) {
	b := balancer.Get(distinct.Name)
	if b == nil {
		t.Fatalf("no balancer registered as %q", distinct.Name)
	}
	if b.Name() != distinct.Name {
		t.Fatalf("balancer %q registered as %q", b.Name(), distinct.Name)
	}
	if _, ok := b.(balancer.ConfigParser); !ok {
		t.Fatalf("balancer %q does not parse its config", distinct.Name)
	}
}
