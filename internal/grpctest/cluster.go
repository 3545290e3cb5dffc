package grpctest

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Cluster is several test servers behind one name, resolved by a manual
// resolver that lists every server's address.
type Cluster struct {
	// Servers are the backends, in the order the resolver lists them.
	Servers []*Server
	// Resolver resolves the cluster's name. It serves one ClientConn:
	// dial it once.
	Resolver *manual.Resolver
}

// StartCluster starts n servers with h, each on its own 127.0.0.1 port;
// they stop when the test ends.
func StartCluster(t testing.TB, n int, h Handlers) *Cluster {
	t.Helper()
	c := &Cluster{Resolver: manual.NewBuilderWithScheme("grpctest")}
	var st resolver.State
	for range n {
		s := Start(t, h)
		c.Servers = append(c.Servers, s)
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: s.Addr}}})
	}
	c.Resolver.InitialState(st)
	return c
}

// SetHandlers replaces the handlers of every server.
func (c *Cluster) SetHandlers(h Handlers) {
	for _, s := range c.Servers {
		s.SetHandlers(h)
	}
}

// Dial returns a client for the cluster, closed when the test ends. The
// options can choose a load-balancing policy with
// grpc.WithDefaultServiceConfig.
func (c *Cluster) Dial(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	base := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(c.Resolver)}
	cc, err := grpc.NewClient(c.Resolver.Scheme()+":///cluster", append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Index returns the position in Servers of the server at addr, or -1.
func (c *Cluster) Index(addr string) int {
	for i, s := range c.Servers {
		if s.Addr == addr {
			return i
		}
	}
	return -1
}
