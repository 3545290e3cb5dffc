package httpretry

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/rebound-go/rebound/internal/observe"
)

func TestAttributes(t *testing.T) {
	resp := &http.Response{StatusCode: 503}
	for _, c := range []struct {
		method, url, target string
		resp                *http.Response
		want                observe.HTTPAttributes
	}{
		{"GET", "http://example.com/a", "example.com", resp, observe.HTTPAttributes{Method: "GET", ServerAddress: "example.com", ServerPort: 80, StatusCode: 503}},
		{"", "https://example.com/a", "example.com", nil, observe.HTTPAttributes{Method: "GET", ServerAddress: "example.com", ServerPort: 443}},
		{"PATCH", "https://[::1]:8443/", "[::1]:8443", resp, observe.HTTPAttributes{Method: "PATCH", ServerAddress: "::1", ServerPort: 8443, StatusCode: 503}},
		// Methods are case-sensitive: "get" is not GET.
		{"get", "http://h:8080/", "h:8080", nil, observe.HTTPAttributes{Method: "_OTHER", ServerAddress: "h", ServerPort: 8080}},
		{"PROPFIND", "ftp://h/", "h", nil, observe.HTTPAttributes{Method: "_OTHER", ServerAddress: "h"}},
		// Past the bound on names, the host is not named either.
		{"DELETE", "http://h:8080/", otherName, resp, observe.HTTPAttributes{Method: "DELETE", ServerAddress: "(other)", StatusCode: 503}},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		req := &http.Request{Method: c.method, URL: u}
		if got := attributes(req, c.target, c.resp); got != c.want {
			t.Errorf("%s %s: attributes %+v, want %+v", c.method, c.url, got, c.want)
		}
	}
}
