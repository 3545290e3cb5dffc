// Package connectshed puts a [shed.Shedder] in front of a connect-go v1
// server (connectrpc.com/connect): [Interceptor] is the Shedder's
// connect.Interceptor. Package shed/connectshed/v2 is the same for
// connect-go v2. Each major has a package of its own, as connectretry
// does, so that a server of one major builds neither the other major
// nor anything of grpc-go for the Shedder:
//
//	mux.Handle(connect.NewUnaryHandler(procedure, greet,
//		connect.WithInterceptors(connectshed.Interceptor(s))))
//
// It behaves as the Shedder's gRPC interceptors do, in the Connect, gRPC
// and gRPC-Web protocols:
//
//   - A call beyond the limit gets CodeUnavailable, wrapping
//     [shed.ErrOverloaded], with the pushback in the error's metadata as
//     grpc-retry-pushback-ms, which connectretry reads in every protocol;
//     its handler never runs.
//   - A handler's own failure with CodeUnavailable or
//     CodeResourceExhausted and no pushback of its own (in the error's
//     metadata, the response trailer, or a google.rpc.RetryInfo detail)
//     gets the Shedder's, on a copy of the error (a handler may return
//     one error to every call), and the limit learns nothing from it; call
//     [shed.ReportOverload] with the handler's context when the failure is
//     this server's overload.
//   - A streaming handler's waits on its client (Receive, Send) hold no
//     slot.
//   - Each procedure has a baseline latency of its own, and the peer is
//     the host of the request's Peer().Addr.
//   - Client calls pass through.
package connectshed

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound/internal/shedhook"
	"github.com/rebound-go/rebound/shed"
)

// pushbackHeader is gRFC A6's pushback trailer.
const pushbackHeader = "grpc-retry-pushback-ms"

// retryInfoType is the type of google.rpc.RetryInfo, a server's own
// "retry after" in an error's details.
const retryInfoType = "google.rpc.RetryInfo"

// Interceptor returns s's connect.Interceptor for connect-go v1 (see the
// package doc). It is safe for concurrent use.
func Interceptor(s *shed.Shedder) connect.Interceptor { return interceptor{s} }

type interceptor struct{ s *shed.Shedder }

func reject(pushback string) error {
	e := connect.NewError(connect.CodeUnavailable, shed.ErrOverloaded)
	e.Meta().Set(pushbackHeader, pushback)
	return e
}

func overloaded(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeResourceExhausted:
		return true
	}
	return false
}

func hasRetryInfo(ce *connect.Error) bool {
	for _, d := range ce.Details() {
		if d.Type() == retryInfoType {
			return true
		}
	}
	return false
}

// end ends r, whose handler returned err within ctx, and returns the
// error to send: a sign of overload without a pushback of its own gets
// the Shedder's, on a copy.
func end(ctx context.Context, r shedhook.Request, err error, trailer http.Header) error {
	var ce *connect.Error
	switch {
	case err == nil && ctx.Err() == nil:
		r.End(int(shed.Served))
		return nil
	case ctx.Err() == nil && overloaded(err) && errors.As(err, &ce) &&
		ce.Meta().Get(pushbackHeader) == "" && trailer.Get(pushbackHeader) == "" && !hasRetryInfo(ce):
		e := connect.NewError(ce.Code(), ce.Unwrap())
		for _, d := range ce.Details() {
			e.AddDetail(d)
		}
		for k, v := range ce.Meta() {
			e.Meta()[k] = append([]string(nil), v...)
		}
		e.Meta().Set(pushbackHeader, r.Refuse())
		err = e
	}
	r.End(int(shed.Failed))
	return err
}

func (c interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (resp connect.AnyResponse, err error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		r, pb := shedhook.Admit(c.s, req.Spec().Procedure, req.Peer().Addr, ctx)
		if r == nil {
			return nil, reject(pb)
		}
		returned := false
		defer func() {
			if !returned {
				r.End(int(shed.Failed))
				return
			}
			if err = end(ctx, r, err, nil); err != nil {
				resp = nil
			}
		}()
		resp, err = next(r.Context(), req)
		returned = true
		return resp, err
	}
}

func (c interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// waitingConn is an admitted streaming handler's connection: its waits
// for the client's messages and for room to send are not the server's
// work.
type waitingConn struct {
	connect.StreamingHandlerConn
	r shedhook.Request
}

func (w *waitingConn) Receive(m any) error {
	w.r.Wait()
	defer w.r.Unwait()
	return w.StreamingHandlerConn.Receive(m)
}

func (w *waitingConn) Send(m any) error {
	w.r.Wait()
	defer w.r.Unwait()
	return w.StreamingHandlerConn.Send(m)
}

func (c interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) (err error) {
		r, pb := shedhook.Admit(c.s, conn.Spec().Procedure, conn.Peer().Addr, ctx)
		if r == nil {
			return reject(pb)
		}
		returned := false
		defer func() {
			if !returned {
				r.End(int(shed.Failed))
				return
			}
			err = end(ctx, r, err, conn.ResponseTrailer())
		}()
		err = next(r.Context(), &waitingConn{conn, r})
		returned = true
		return err
	}
}
