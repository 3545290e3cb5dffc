// Package connectshed puts a [shed.Shedder] in front of a connect-go v2
// server (connectrpc.com/connect/v2): [Interceptor] is the Shedder's
// connect.ServerInterceptor, what [shed.Shedder.ConnectInterceptor] is
// for connect-go v1. It is a package of its own because no package of
// rebound imports both majors of connect-go: package shed imports v1,
// this one v2. (Through package shed, a v2 server still builds
// connect-go v1 and grpc-go, which shed's own front doors use.)
//
//	srv := connect.NewServer(connectshed.Interceptor(s))
//
// It behaves as the v1 interceptor does, in every transport (connecthttp
// in the Connect, gRPC and gRPC-Web protocols, and connectinprocess):
//
//   - A call beyond the limit gets CodeUnavailable, wrapping
//     [shed.ErrOverloaded], with the pushback as the response trailer
//     grpc-retry-pushback-ms, which connectretry (both majors) and gRPC
//     clients read; its handler never runs.
//   - A handler's own failure with CodeUnavailable or
//     CodeResourceExhausted and no pushback of its own (in the call's
//     response header or trailer, or a google.rpc.RetryInfo detail) gets
//     the Shedder's, and the limit learns nothing from it; call
//     [shed.ReportOverload] with the handler's context when the failure is
//     this server's overload.
//   - A handler's waits on its client (the stream's Receive and Send, the
//     request message of a unary call included) hold no slot.
//   - Each procedure has a baseline latency of its own, and the peer is
//     the host of the call's connect.CallInfo PeerAddr.
//
// One thing is v2's own: a handler that returns an error a peer sent it
// (IsRemote, the failure of a backend it called) is passing on another
// server's verdict, which connect's server transports send as
// CodeInternal; it gets no pushback here, so that an overloaded backend's
// pushback is not made this server's.
package connectshed

import (
	"context"
	"errors"

	"connectrpc.com/connect/v2"

	"github.com/rebound-go/rebound/internal/shedhook"
	"github.com/rebound-go/rebound/shed"
)

// pushbackHeader is gRFC A6's pushback trailer.
const pushbackHeader = "grpc-retry-pushback-ms"

// retryInfoType is the type of google.rpc.RetryInfo, a server's own
// "retry after" in an error's details.
const retryInfoType = "google.rpc.RetryInfo"

// Interceptor returns s's connect.ServerInterceptor for connect-go v2 (see
// the package doc). It is safe for concurrent use.
func Interceptor(s *shed.Shedder) connect.ServerInterceptor {
	return func(next connect.ServerFunc) connect.ServerFunc {
		return func(ctx context.Context, spec connect.Spec, stream connect.ServerStream) (err error) {
			info, _ := connect.CallInfoForServerContext(ctx)
			var addr string
			if info != nil {
				addr = info.PeerAddr
			}
			r, pb := shedhook.Admit(s, spec.Procedure, addr, ctx)
			if r == nil {
				if info != nil {
					info.ResponseTrailer().Set(pushbackHeader, pb)
				}
				return connect.NewError(connect.CodeUnavailable, shed.ErrOverloaded.Error()).WithCause(shed.ErrOverloaded)
			}
			returned := false
			defer func() {
				if !returned {
					r.End(int(shed.Failed))
					return
				}
				end(ctx, r, info, err)
			}()
			err = next(r.Context(), spec, &waitingStream{stream, r})
			returned = true
			return err
		}
	}
}

// end ends r, whose handler returned err within ctx: a sign of overload
// without a pushback of its own gets the Shedder's, in the trailer.
func end(ctx context.Context, r shedhook.Request, info *connect.CallInfo, err error) {
	if err == nil && ctx.Err() == nil {
		r.End(int(shed.Served))
		return
	}
	var ce *connect.Error
	if ctx.Err() == nil && errors.As(err, &ce) && !ce.IsRemote() && overloaded(ce) && info != nil &&
		info.ResponseHeader().Get(pushbackHeader) == "" && info.ResponseTrailer().Get(pushbackHeader) == "" &&
		!hasRetryInfo(ce) {
		info.ResponseTrailer().Set(pushbackHeader, r.Refuse())
	}
	r.End(int(shed.Failed))
}

func overloaded(ce *connect.Error) bool {
	switch ce.Code() {
	case connect.CodeUnavailable, connect.CodeResourceExhausted:
		return true
	}
	return false
}

func hasRetryInfo(ce *connect.Error) bool {
	for _, d := range ce.Details() {
		if d.Type == retryInfoType {
			return true
		}
	}
	return false
}

// waitingStream is an admitted handler's stream: its waits for the
// client's messages and for room to send are not the server's work.
type waitingStream struct {
	connect.ServerStream
	r shedhook.Request
}

func (w *waitingStream) Receive(m any) error {
	w.r.Wait()
	defer w.r.Unwait()
	return w.ServerStream.Receive(m)
}

func (w *waitingStream) Send(m any) error {
	w.r.Wait()
	defer w.r.Unwait()
	return w.ServerStream.Send(m)
}
