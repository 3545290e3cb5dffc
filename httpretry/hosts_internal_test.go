package httpretry

import (
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/bounded"
)

// ok is a base RoundTripper that answers every request with 200 without a
// network: this test is about the Transport's own bookkeeping.
type ok struct{}

func (ok) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// The Transport keeps the state of a bounded number of hosts; an evicted
// host that comes back gets a new budget. (Which hosts are evicted is
// package bounded's to test.)
func TestHostsBounded(t *testing.T) {
	var made []string
	tr := NewTransport(ok{}, WithBudgetPerHost(func(host string) rebound.Budget {
		made = append(made, host)
		return nil
	}))
	tr.hosts = bounded.New[string, *host](2)
	get := func(name string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+name+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	absent := errors.New("absent")
	kept := func(name string) bool {
		_, err := tr.hosts.Get(name, func() (*host, error) { return nil, absent })
		return err == nil
	}
	hosts := []string{"a", "b", "c", "d", "e"}
	for _, name := range hosts {
		get(name)
	}
	if n := tr.hosts.Len(); n != 2 {
		t.Fatalf("%d hosts kept, want 2", n)
	}
	if !reflect.DeepEqual(made, hosts) {
		t.Fatalf("budgets made for %q, want one per host: %q", made, hosts)
	}
	for _, name := range hosts {
		if !kept(name) {
			get(name)
			if made[len(made)-1] != name {
				t.Fatalf("budgets made for %q: none for %s's return", made, name)
			}
			return
		}
	}
	t.Fatal("no host was evicted")
}

func TestNamesBounded(t *testing.T) {
	tr := NewTransport(ok{})
	tr.maxNames = 2
	for _, r := range []struct{ method, host string }{
		{"", "a"}, {http.MethodGet, "a"}, {http.MethodPut, "a"}, {http.MethodGet, "b"}, {http.MethodPut, "a"},
	} {
		req, _ := http.NewRequest(r.method, "http://"+r.host+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// An empty method is GET; pairs past the bound share one name.
	got := map[string]uint64{}
	for name, s := range tr.Stats() {
		got[name] = s.Calls
	}
	if want := map[string]uint64{"GET a": 2, "PUT a": 2, "(other)": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("calls by name %v, want %v", got, want)
	}
	if name, target := tr.name(http.MethodGet, "c"); name != "(other)" || target != "(other)" {
		t.Fatalf("name past the bound %q, target %q; want (other) for both", name, target)
	}
}
