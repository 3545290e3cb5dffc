package shed

import (
	"net"
	"testing"
)

// A peer is an IPv4 address or an IPv6 /64, whatever its port, in every
// front door's form: a host that rotates its ports, or its addresses within
// its /64, is still one peer.
func TestPeerKey(t *testing.T) {
	s, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tcp := func(ip string, port int) uint64 {
		return s.peerOfAddr(&net.TCPAddr{IP: net.ParseIP(ip), Port: port})
	}
	for _, same := range [][]uint64{
		{tcp("10.0.0.1", 1), tcp("10.0.0.1", 2), tcp("::ffff:10.0.0.1", 3), s.peerOfHost("10.0.0.1:4"), s.peerOfHost("[::ffff:10.0.0.1]:5"), s.peerOfHost("10.0.0.1")},
		{tcp("2001:db8:1:2::1", 1), tcp("2001:db8:1:2:ffff:ffff:ffff:ffff", 2), s.peerOfHost("[2001:db8:1:2:abcd::7]:443"), s.peerOfHost("[2001:db8:1:2::9%eth0]:80")},
		{s.peerOfHost("@"), s.peerOfAddr(&net.UnixAddr{Name: "@", Net: "unix"})},
	} {
		for i, k := range same {
			if k != same[0] {
				t.Errorf("key %d of %v differs from the first", i, same)
			}
		}
	}
	distinct := []uint64{tcp("10.0.0.1", 1), tcp("10.0.0.2", 1), tcp("2001:db8:1:2::1", 1), tcp("2001:db8:1:3::1", 1), s.peerOfHost("@")}
	for i := range distinct {
		for j := range i {
			if distinct[i] == distinct[j] {
				t.Errorf("keys %d and %d are the same", j, i)
			}
		}
	}
}
