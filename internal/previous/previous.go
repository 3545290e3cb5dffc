// Package previous reads the number of attempts that came before the one
// a server is handling, by one rule for the three front doors: gRFC A6's
// grpc-previous-rpc-attempts (grpcretry and connectretry) and the header
// of httpretry's WithPreviousAttemptsHeader. It imports nothing of gRPC,
// so that httpretry does not either.
package previous

import "strconv"

// Parse reads the values of such a header as a server receives them: the
// number of attempts before this one, or 0 when the header is absent,
// repeated, or not a non-negative integer.
func Parse(v []string) int {
	if len(v) != 1 {
		return 0
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n < 0 {
		return 0
	}
	return n
}
