package serviceconfig_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/serviceconfig"
)

// grpcCodes is the table of gRPC status codes (grpc/grpc doc/statuscodes.md):
// the numbers are part of the wire protocol, so front doors may convert with
// codes.Code(c).
var grpcCodes = []struct {
	code serviceconfig.Code
	num  uint32
	name string
}{
	{serviceconfig.OK, 0, "OK"},
	{serviceconfig.Cancelled, 1, "CANCELLED"},
	{serviceconfig.Unknown, 2, "UNKNOWN"},
	{serviceconfig.InvalidArgument, 3, "INVALID_ARGUMENT"},
	{serviceconfig.DeadlineExceeded, 4, "DEADLINE_EXCEEDED"},
	{serviceconfig.NotFound, 5, "NOT_FOUND"},
	{serviceconfig.AlreadyExists, 6, "ALREADY_EXISTS"},
	{serviceconfig.PermissionDenied, 7, "PERMISSION_DENIED"},
	{serviceconfig.ResourceExhausted, 8, "RESOURCE_EXHAUSTED"},
	{serviceconfig.FailedPrecondition, 9, "FAILED_PRECONDITION"},
	{serviceconfig.Aborted, 10, "ABORTED"},
	{serviceconfig.OutOfRange, 11, "OUT_OF_RANGE"},
	{serviceconfig.Unimplemented, 12, "UNIMPLEMENTED"},
	{serviceconfig.Internal, 13, "INTERNAL"},
	{serviceconfig.Unavailable, 14, "UNAVAILABLE"},
	{serviceconfig.DataLoss, 15, "DATA_LOSS"},
	{serviceconfig.Unauthenticated, 16, "UNAUTHENTICATED"},
}

func TestCodeValuesAndNames(t *testing.T) {
	for _, tc := range grpcCodes {
		if uint32(tc.code) != tc.num {
			t.Errorf("%s = %d, want %d", tc.name, uint32(tc.code), tc.num)
		}
		if got := tc.code.String(); got != tc.name {
			t.Errorf("Code(%d).String() = %q, want %q", tc.num, got, tc.name)
		}
		for _, s := range []string{tc.name, strings.ToLower(tc.name), titleCase(tc.name)} {
			if got, err := serviceconfig.ParseCode(s); err != nil || got != tc.code {
				t.Errorf("ParseCode(%q) = %v, %v; want %v, nil", s, got, err, tc.code)
			}
		}
	}
	for _, c := range []serviceconfig.Code{17, 32, 1 << 31} {
		want := "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
		if got := c.String(); got != want {
			t.Errorf("Code(%d).String() = %q, want %q", uint32(c), got, want)
		}
	}
}

// titleCase turns "INVALID_ARGUMENT" into "Invalid_argument".
func titleCase(s string) string {
	return s[:1] + strings.ToLower(s[1:])
}

func TestParseCode(t *testing.T) {
	tests := []struct {
		in      string
		want    serviceconfig.Code
		wantErr bool
	}{
		{in: "UNAVAILABLE", want: serviceconfig.Unavailable},
		{in: "unavailable", want: serviceconfig.Unavailable},
		{in: "Unavailable", want: serviceconfig.Unavailable},
		{in: "uNaVaIlAbLe", want: serviceconfig.Unavailable},
		{in: "ok", want: serviceconfig.OK},
		{in: "data_loss", want: serviceconfig.DataLoss},
		{in: "", wantErr: true},
		{in: "FOO", wantErr: true},
		{in: "14", wantErr: true},           // the integer form is a JSON number, not a string
		{in: "CANCELED", wantErr: true},     // grpc-go's Go spelling is not a service config name
		{in: " UNAVAILABLE", wantErr: true}, // no trimming
		{in: "UNAVAILABLE ", wantErr: true},
		{in: "UNAVAILABLE\x00", wantErr: true},
		{in: "UNAVAILABLE_", wantErr: true},
		{in: "DATA-LOSS", wantErr: true}, // no separator folding
		{in: "DATALOSS", wantErr: true},
		{in: "UN\u212ANOWN", wantErr: true},        // Kelvin sign: Unicode folding would accept it
		{in: "ALREADY_EXI\u017FTS", wantErr: true}, // long s: likewise
		{in: "unavailable\u0130", wantErr: true},
		{in: strings.Repeat("A", 1<<16), wantErr: true},
	}
	for _, tc := range tests {
		got, err := serviceconfig.ParseCode(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseCode(%.20q) = %v, want an error", tc.in, got)
			} else if !strings.HasPrefix(err.Error(), "serviceconfig: unknown status code name ") {
				t.Errorf("ParseCode(%.20q) error = %q, want the package prefix and a reason", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseCode(%q) = %v, %v; want %v, nil", tc.in, got, err, tc.want)
		}
	}
}

func TestCodeSet(t *testing.T) {
	var empty serviceconfig.CodeSet
	if empty.Has(serviceconfig.OK) || empty.Codes() != nil || empty.String() != "[]" {
		t.Errorf("zero CodeSet: Has(OK)=%v Codes()=%v String()=%q; want false, nil, \"[]\"",
			empty.Has(serviceconfig.OK), empty.Codes(), empty.String())
	}

	s := serviceconfig.NewCodeSet(serviceconfig.Unavailable, serviceconfig.OK, serviceconfig.Unavailable,
		serviceconfig.Unauthenticated, 17, 31, 32, 1<<31)
	want := []serviceconfig.Code{serviceconfig.OK, serviceconfig.Unavailable, serviceconfig.Unauthenticated}
	if got := s.Codes(); !slices.Equal(got, want) {
		t.Errorf("Codes() = %v, want %v", got, want)
	}
	if got := s.String(); got != "[OK UNAVAILABLE UNAUTHENTICATED]" {
		t.Errorf("String() = %q", got)
	}
	for c := serviceconfig.Code(0); c < 40; c++ {
		if got, want := s.Has(c), slices.Contains(want, c); got != want {
			t.Errorf("Has(%v) = %v, want %v", c, got, want)
		}
	}
	if s.Has(1 << 31) {
		t.Error("Has(1<<31) = true")
	}

	// Bits beyond the valid codes, as in a hand-made CodeSet, are not members.
	raw := serviceconfig.CodeSet(1<<20 | 1<<14)
	if raw.Has(20) || !raw.Has(serviceconfig.Unavailable) || raw.String() != "[UNAVAILABLE]" {
		t.Errorf("CodeSet(1<<20|1<<14): Has(20)=%v Has(14)=%v String()=%q", raw.Has(20), raw.Has(14), raw.String())
	}

	all := serviceconfig.NewCodeSet()
	for _, tc := range grpcCodes {
		all |= serviceconfig.NewCodeSet(tc.code)
	}
	if got := len(all.Codes()); got != 17 {
		t.Errorf("all codes: len(Codes()) = %d, want 17", got)
	}
}

func BenchmarkCodeSetHas(b *testing.B) {
	s := serviceconfig.NewCodeSet(serviceconfig.Unavailable, serviceconfig.Aborted)
	b.ReportAllocs()
	n := 0
	for i := 0; b.Loop(); i++ {
		if s.Has(serviceconfig.Code(i & 15)) {
			n++
		}
	}
	_ = n
}
