package grpcretry

import (
	"context"
	"reflect"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// grpc-go retries the calls of a method whose service config, as grpc-go
// applies it, has a retryPolicy, and it does so below the interceptors:
// each of rebound's attempts would be retried again, maxAttempts² in all.
// rebound hands grpc-go no retryPolicy of its own, nor one from a resolver
// it wraps, but one may reach grpc-go by another path: the conn's
// grpc.WithDefaultServiceConfig (whichever order the options come in, the
// default applies when the resolver delivers no config), or a resolver
// that rebound does not wrap. grpc-go offers no way to turn its retries
// off for one call, and turning them off for the conn
// (grpc.WithDisableRetry) would also drop the retry policies of xDS
// routes, which rebound leaves to grpc-go. So a call that rebound would
// retry or hedge fails instead, before any attempt, with an error that
// names the conflict and the fix; grpc-go's applied config is read with
// ClientConn.GetMethodConfig. xDS routes' policies reach grpc-go through a
// config selector, which GetMethodConfig does not show: they stay as the
// package doc says.

// What grpc-go's config, on a method entry's conn, says of the method's
// retries, once known.
const (
	nativeUnknown int32 = iota // not known yet: grpc-go may not have applied a config
	nativeNone                 // no retryPolicy: rebound retries alone
	nativeRetries              // a retryPolicy: calls that rebound would retry fail
)

// nativeConflict returns the error of a call of m's method on cc that
// rebound would retry or hedge while grpc-go has a retryPolicy for it,
// or nil. What it learns is kept in m, which lives as long as the
// target, so that a method's later calls pay one atomic load; the
// first waits, as grpc-go would, until grpc-go has applied a service
// config to the conn.
func (c *Client) nativeConflict(ctx context.Context, m *methodEntry, cc *grpc.ClientConn) error {
	switch m.native.Load() {
	case nativeNone:
		return nil
	case nativeRetries:
		return nativeError(m.name)
	}
	if cc == nil {
		return nil // the interceptor called by hand, without a conn
	}
	if retriesDisabled(cc) {
		m.native.Store(nativeNone)
		return nil
	}
	applied := awaitConfig(ctx, cc)
	if cc.GetMethodConfig(m.name).RetryPolicy != nil {
		m.native.Store(nativeRetries)
		return nativeError(m.name)
	}
	if applied {
		m.native.Store(nativeNone)
	}
	return nil
}

// retriesDisabled reports whether cc was made with grpc.WithDisableRetry,
// which keeps grpc-go from retrying whatever its config says. grpc-go has
// no accessor for its dial options, so the field is read by reflection;
// a grpc-go that renames it reads as retries on, and
// TestGRPCGoRetryPolicyRetriesDisabled fails.
func retriesDisabled(cc *grpc.ClientConn) bool {
	v := reflect.ValueOf(cc).Elem().FieldByName("dopts")
	if !v.IsValid() {
		return false
	}
	v = v.FieldByName("disableRetry")
	return v.IsValid() && v.Kind() == reflect.Bool && v.Bool()
}

// awaitConfig waits until grpc-go has applied a service config to cc
// (the resolver's, or the default), or ctx ends, and reports whether it
// has. grpc-go applies it when the resolver first speaks, before the
// conn's state leaves CONNECTING, into which leaving IDLE puts it; a
// call of grpc-go's own waits for the same, picking a connection.
func awaitConfig(ctx context.Context, cc *grpc.ClientConn) bool {
	s := cc.GetState()
	if s == connectivity.Idle {
		// A conn not used yet. Connecting it builds the resolver; a
		// conn that stays IDLE after that has a balancer that connects
		// on a call's pick, and was given its config first.
		cc.Connect()
		s = cc.GetState()
	}
	if s == connectivity.Connecting {
		if !cc.WaitForStateChange(ctx, s) {
			return false
		}
		s = cc.GetState()
	}
	return s != connectivity.Connecting && s != connectivity.Shutdown
}

// nativeError is the error of a call of method that grpc-go would retry
// below rebound's retries.
func nativeError(method string) error {
	return status.Error(codes.Internal, "grpcretry: "+method+": grpc-go also has a retryPolicy for this method, "+
		"from grpc.WithDefaultServiceConfig or from a name resolver that grpcretry does not wrap, "+
		"and would retry each of rebound's attempts (maxAttempts² attempts in all); "+
		"give the retryPolicy to rebound alone: leave it out of grpc.WithDefaultServiceConfig "+
		"(grpcretry.DialOptions hands grpc-go the config's loadBalancingConfig and healthCheckConfig itself), "+
		"and pass a custom resolver with grpcretry.WithResolver rather than grpc.WithResolvers")
}
