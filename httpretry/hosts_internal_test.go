package httpretry

import (
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

func TestHostsBounded(t *testing.T) {
	var made []string
	tr := NewTransport(ok{}, WithBudget(func(host string) rebound.Budget {
		made = append(made, host)
		return nil
	}))
	tr.hosts = bounded.New[string, *host](2)
	for _, host := range []string{"a", "b", "a", "c", "a", "b"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// Two hosts are kept: c evicts b, the one not used since it was made
	// (a was used again), and b comes back with a new budget.
	if want := []string{"a", "b", "c", "b"}; !reflect.DeepEqual(made, want) {
		t.Fatalf("budgets made for %q, want %q", made, want)
	}
	if n := tr.hosts.Len(); n != 2 {
		t.Fatalf("%d hosts kept, want 2", n)
	}
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
