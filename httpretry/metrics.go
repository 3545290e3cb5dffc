package httpretry

import (
	"net/http"
	"strconv"

	"github.com/rebound-go/rebound/internal/observe"
)

// attributes returns the metric attributes of a request to req's URL,
// answered by resp (nil when no response is returned). target is the
// request's target in Stats: otherName past the bound on names, and then
// the host is not named either, so that the attributes stay as bounded as
// the names.
func attributes(req *http.Request, target string, resp *http.Response) observe.HTTPAttributes {
	a := observe.HTTPAttributes{Method: knownMethod(req.Method), ServerAddress: otherName}
	if target != otherName {
		a.ServerAddress = req.URL.Hostname()
		a.ServerPort = port(req.URL.Scheme, req.URL.Port())
	}
	if resp != nil {
		a.StatusCode = resp.StatusCode
	}
	return a
}

// knownMethod returns method when the HTTP semantic conventions know it
// (RFC 9110's methods and PATCH), GET for an empty one (as net/http sends
// it), and "_OTHER" for the rest, which would otherwise make a metric
// series per made-up method.
func knownMethod(method string) string {
	switch method {
	case "":
		return http.MethodGet
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch:
		return method
	}
	return "_OTHER"
}

// port returns the port a URL names, or its scheme's default: the
// conventions require server.port even when the URL leaves it out.
func port(scheme, p string) int {
	if p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return 0
		}
		return n
	}
	switch scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}
