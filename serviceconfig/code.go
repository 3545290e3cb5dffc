package serviceconfig

import (
	"fmt"
	"strconv"
	"strings"
)

// Code is a gRPC status code. The values equal those of
// google.golang.org/grpc/codes, so grpc-go code converts with codes.Code(c)
// and back with Code(c). The zero value is OK.
type Code uint32

// The gRPC status codes, named as in the service config's string form.
const (
	OK                 Code = 0
	Cancelled          Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)

// maxCode is the largest valid status code.
const maxCode = Unauthenticated

var codeNames = [maxCode + 1]string{
	OK:                 "OK",
	Cancelled:          "CANCELLED",
	Unknown:            "UNKNOWN",
	InvalidArgument:    "INVALID_ARGUMENT",
	DeadlineExceeded:   "DEADLINE_EXCEEDED",
	NotFound:           "NOT_FOUND",
	AlreadyExists:      "ALREADY_EXISTS",
	PermissionDenied:   "PERMISSION_DENIED",
	ResourceExhausted:  "RESOURCE_EXHAUSTED",
	FailedPrecondition: "FAILED_PRECONDITION",
	Aborted:            "ABORTED",
	OutOfRange:         "OUT_OF_RANGE",
	Unimplemented:      "UNIMPLEMENTED",
	Internal:           "INTERNAL",
	Unavailable:        "UNAVAILABLE",
	DataLoss:           "DATA_LOSS",
	Unauthenticated:    "UNAUTHENTICATED",
}

// String returns the canonical upper-case name, such as "UNAVAILABLE", or
// "Code(17)" for a value outside 0..16.
func (c Code) String() string {
	if c <= maxCode {
		return codeNames[c]
	}
	return "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// ParseCode returns the code named s, compared ignoring ASCII case:
// "UNAVAILABLE", "unavailable" and "Unavailable" all give [Unavailable].
// Only the names are accepted; the integer form ("14") is a JSON number in a
// service config, not a string, and is rejected here. Non-ASCII look-alikes
// that Unicode case folding would match (such as the Kelvin sign for K) are
// rejected too.
func ParseCode(s string) (Code, error) {
	for i, name := range codeNames {
		if asciiEqualFold([]byte(s), name) {
			return Code(i), nil
		}
	}
	return 0, fmt.Errorf("serviceconfig: unknown status code name %q", excerpt(s))
}

// asciiEqualFold reports whether s equals the upper-case ASCII string upper
// when ASCII letters in s are compared without case.
func asciiEqualFold(s []byte, upper string) bool {
	if len(s) != len(upper) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}

// CodeSet is a set of valid status codes (0..16), one bit per code, so that a
// membership test on the per-call path is a shift and a mask. The zero value
// is the empty set. A CodeSet is a value and safe for concurrent use.
type CodeSet uint32

// NewCodeSet returns the set holding codes. Values that are not valid status
// codes (above 16) are left out, since no call can fail with them.
func NewCodeSet(codes ...Code) CodeSet {
	var s CodeSet
	for _, c := range codes {
		if c <= maxCode {
			s |= 1 << c
		}
	}
	return s
}

// Has reports whether c is in s.
func (s CodeSet) Has(c Code) bool {
	return c <= maxCode && s&(1<<c) != 0
}

// Codes returns the members of s in increasing numeric order, or nil if s is
// empty.
func (s CodeSet) Codes() []Code {
	var out []Code
	for c := OK; c <= maxCode; c++ {
		if s.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// String lists the members by name in numeric order, like "[UNAVAILABLE]" or
// "[]".
func (s CodeSet) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, c := range s.Codes() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(c.String())
	}
	b.WriteByte(']')
	return b.String()
}
