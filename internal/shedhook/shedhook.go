// Package shedhook lets a front door of package shed that lives outside
// it (shed/connectshed, for connect-go v2, which package shed must not
// import beside connect-go v1) admit requests as shed's own interceptors
// do: by procedure, with a baseline latency per procedure, a peer, waits
// on the client that hold no slot, and the Shedder's pushback for a
// handler's own sign of overload. Package shed sets Admit when it is
// initialized.
package shedhook

import "context"

// Request is a request a Shedder admitted.
type Request interface {
	// Context returns the handler's context: parent, in which
	// shed.ReportOverload finds the request.
	Context() context.Context
	// Wait and Unwait bracket a wait of the handler on its client.
	Wait()
	Unwait()
	// Refuse returns the pushback, as grpc-retry-pushback-ms says it, for
	// the handler's failure with a sign of overload and no pushback of its
	// own.
	Refuse() string
	// End ends the request with a shed.Outcome; only the first call
	// counts.
	End(outcome int)
}

// Admit asks s, a *shed.Shedder, to start a request of procedure from the
// peer at addr ("host:port", or "" when there is none), whose handler
// runs within parent. When it is admitted, r is not nil; when it is not,
// pushback says what to tell the client, as grpc-retry-pushback-ms does.
var Admit func(s any, procedure, addr string, parent context.Context) (r Request, pushback string)
