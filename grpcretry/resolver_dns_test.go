package grpcretry_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// dnsServer answers DNS queries over UDP on 127.0.0.1: host's A record is
// 127.0.0.1, and _grpc_config.<host> has a TXT record, as a service owner
// publishes it. Every other name does not exist.
type dnsServer struct {
	conn net.PacketConn
	host string // with the trailing dot
	txt  []string
	wg   sync.WaitGroup
}

func startDNS(t *testing.T, host string, txt ...string) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{conn: pc, host: host + ".", txt: txt}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() {
		pc.Close()
		s.wg.Wait()
	})
	return s
}

func (s *dnsServer) serve() {
	defer s.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, addr, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, ok := s.answer(buf[:n]); ok {
			_, _ = s.conn.WriteTo(out, addr)
		}
	}
}

func (s *dnsServer) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
	b.EnableCompression()
	name := strings.ToLower(q.Name.String())
	known := name == s.host || name == "_grpc_config."+s.host
	if !known {
		b = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: dnsmessage.RCodeNameError})
	}
	if err := b.StartQuestions(); err != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil, false
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
	switch {
	case !known:
	case q.Type == dnsmessage.TypeA && name == s.host:
		if b.AResource(rh, dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}}) != nil {
			return nil, false
		}
	case q.Type == dnsmessage.TypeTXT && name != s.host:
		if b.TXTResource(rh, dnsmessage.TXTResource{TXT: s.txt}) != nil {
			return nil, false
		}
	}
	out, err := b.Finish()
	return out, err == nil
}

// The one line for a DNS target takes the policy a service owner
// published in the TXT record of _grpc_config.<host> (gRFC A2), in place
// of the config given in code. grpc-go's dns resolver is pointed at a DNS
// server of the test's by the target's authority.
func TestDNSTXTConfig(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1<<30, codes.Unavailable))
	_, port, err := net.SplitHostPort(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// Split in two strings, as a value over 255 bytes must be; the
	// resolver joins them.
	js := policyJSON(3, "")
	dns := startDNS(t, "api.rebound.test", `grpc_config=[{"serviceConfig":`, js+`}]`)
	target := fmt.Sprintf("dns://%s/api.rebound.test:%s", dns.conn.LocalAddr(), port)
	cc, err := grpc.NewClient(target, append(grpcretry.DialOptions(retryConfig(t, 2, `"UNAVAILABLE"`, ""), grpcretry.WithClock(clocktest.NewAuto())),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var n int
	_, err = testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
	if status.Code(err) != codes.Unavailable || n != 3 || srv.Count(grpctest.UnaryCall) != 3 {
		t.Fatalf("%v after %d attempts (server saw %d); want UNAVAILABLE after the TXT record's 3", err, n, srv.Count(grpctest.UnaryCall))
	}
}
