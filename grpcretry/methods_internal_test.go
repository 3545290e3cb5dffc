package grpcretry

import (
	"fmt"
	"testing"

	"github.com/rebound-go/rebound/serviceconfig"
)

// A method is resolved once per target: later calls get the same entry,
// with the config's method config and the target's strategy for it; a
// method without a policy has none; past maxMethods, methods are resolved
// on each call and the target keeps no more.
func TestMethodEntries(t *testing.T) {
	cfg, err := serviceconfig.Parse([]byte(`{"methodConfig":[
		{"name":[{"service":"s.Retried"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s",
			"maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}},
		{"name":[{"service":"s.Plain"}],"timeout":"1s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tg := c.target(nil)

	a := c.method(tg, "/s.Retried/A")
	if again := c.method(tg, "/s.Retried/A"); again != a {
		t.Fatal("a second call of the same method resolved it again")
	}
	if a.mc != cfg.MethodConfig("/s.Retried/A") || a.policy == nil || a.policy != c.policy(tg, a.mc) || a.policy.retry == nil {
		t.Fatalf("entry %+v: want the config's method config and the target's retry strategy", a)
	}
	b := c.method(tg, "/s.Retried/B")
	if b == a || b.name != "/s.Retried/B" {
		t.Fatalf("another method got entry %q", b.name)
	}
	if c.method(tg, "/s.Retried/A") != a {
		t.Fatal("switching methods lost the first entry")
	}
	if p := c.method(tg, "/s.Plain/C"); p.mc == nil || p.policy != nil {
		t.Fatalf("a method without a policy: mc %v, policy %v; want its method config and no strategy", p.mc, p.policy)
	}

	for i := range maxMethods + 10 {
		c.method(tg, fmt.Sprintf("/s.Retried/M%d", i))
	}
	if n := tg.nmethods.Load(); n != maxMethods {
		t.Fatalf("the target keeps %d entries, want at most %d", n, maxMethods)
	}
	over := "/s.Retried/over"
	e1, e2 := c.method(tg, over), c.method(tg, over)
	if e1.mc == nil || e1.policy == nil || e1.policy != e2.policy {
		t.Fatalf("past the bound: %+v; want the method resolved, with the target's shared strategy", e1)
	}
	if _, kept := tg.methods.Load(over); kept {
		t.Fatal("past the bound, the target kept a new entry")
	}
}
