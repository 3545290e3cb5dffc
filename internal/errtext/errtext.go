// Package errtext is the one wording of the error of a call whose retrying
// stopped, shared by package rebound and the protocol packages.
package errtext

import (
	"strconv"
	"strings"
)

// GaveUp returns "pkg: gave up after N attempts (reason): last", leaving out
// the reason or the last attempt's error when nil. A reason's own package
// prefix ("rebound: ", "httpretry: ") is dropped.
func GaveUp(pkg string, attempts int, reason, last error) string {
	var b strings.Builder
	b.WriteString(pkg)
	b.WriteString(": gave up after ")
	b.WriteString(strconv.Itoa(attempts))
	if attempts == 1 {
		b.WriteString(" attempt")
	} else {
		b.WriteString(" attempts")
	}
	if reason != nil {
		msg := reason.Error()
		for _, p := range []string{"rebound: ", "httpretry: ", "grpcretry: ", "connectretry: "} {
			msg = strings.TrimPrefix(msg, p)
		}
		b.WriteString(" (")
		b.WriteString(msg)
		b.WriteString(")")
	}
	if last != nil {
		b.WriteString(": ")
		b.WriteString(last.Error())
	}
	return b.String()
}
