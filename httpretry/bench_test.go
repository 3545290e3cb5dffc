package httpretry_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rebound-go/rebound/httpretry"
)

// BenchmarkTransport measures the success path: the same server and base
// transport, with and without retries on top.
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		wrap func(http.RoundTripper) http.RoundTripper
	}{
		{"bare", func(rt http.RoundTripper) http.RoundTripper { return rt }},
		{"rebound", func(rt http.RoundTripper) http.RoundTripper { return httpretry.NewTransport(rt) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			base := &http.Transport{MaxIdleConnsPerHost: 64}
			defer base.CloseIdleConnections()
			client := &http.Client{Transport: tc.wrap(base)}
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					get(b, client, srv.URL)
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						get(b, client, srv.URL)
					}
				})
			})
		})
	}
}

func get(b *testing.B, client *http.Client, url string) {
	resp, err := client.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// canned answers every request at once without a network, so that
// BenchmarkOverhead shows the Transport's own cost.
type canned struct{}

func (canned) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// BenchmarkOverhead measures what the Transport adds to one successful
// round trip, without the network.
func BenchmarkOverhead(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "http://example.test/", nil)
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", canned{}},
		{"rebound", httpretry.NewTransport(canned{})},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tc.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}
