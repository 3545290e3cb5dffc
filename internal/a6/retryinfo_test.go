package a6_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		d    *durationpb.Duration
		want time.Duration
		ok   bool
	}{
		{nil, 0, false},
		{durationpb.New(0), 0, true},
		{durationpb.New(1500 * time.Millisecond), 1500 * time.Millisecond, true},
		{durationpb.New(-time.Second), 0, false},
		{&durationpb.Duration{Nanos: -1}, 0, false},
		{&durationpb.Duration{Seconds: 1, Nanos: -1}, 0, false},           // mixed signs
		{&durationpb.Duration{Nanos: 1_000_000_000}, 0, false},            // nanos out of range
		{&durationpb.Duration{Seconds: 315_576_000_000}, 1<<63 - 1, true}, // the largest valid: beyond any cap
	} {
		got, ok := a6.RetryDelay(&errdetails.RetryInfo{RetryDelay: tc.d})
		if got != tc.want || ok != tc.ok {
			t.Errorf("RetryDelay(%v) = %v, %v; want %v, %v", tc.d, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := a6.RetryDelay(nil); ok {
		t.Error("RetryDelay(nil) ok")
	}
}

func TestHintsApply(t *testing.T) {
	yes := rebound.RetryInfo{Safety: rebound.SafetyYes}
	h := a6.Hints{Cap: 10 * time.Second, Required: serviceconfig.NewCodeSet(serviceconfig.ResourceExhausted)}
	for _, tc := range []struct {
		name  string
		info  rebound.RetryInfo
		code  serviceconfig.Code
		delay time.Duration
		has   bool
		want  rebound.RetryInfo
	}{
		{"minimum wait", yes, serviceconfig.Unavailable, 3 * time.Second, true, rebound.RetryInfo{Safety: rebound.SafetyYes, MinDelay: 3 * time.Second}},
		{"at the cap", yes, serviceconfig.Unavailable, 10 * time.Second, true, rebound.RetryInfo{Safety: rebound.SafetyYes, MinDelay: 10 * time.Second}},
		{"beyond the cap", yes, serviceconfig.Unavailable, 11 * time.Second, true, rebound.RetryInfo{Safety: rebound.SafetyYes, Stop: rebound.ErrRetryDelayTooLong}},
		{"none", yes, serviceconfig.Unavailable, 0, false, yes},
		{"pushback wins", rebound.RetryInfo{Safety: rebound.SafetyYes, HasRetryAfter: true, RetryAfter: time.Second}, serviceconfig.Unavailable, 3 * time.Second, true,
			rebound.RetryInfo{Safety: rebound.SafetyYes, HasRetryAfter: true, RetryAfter: time.Second}},
		{"pushback stop wins", rebound.RetryInfo{Safety: rebound.SafetyYes, ServerStop: true}, serviceconfig.Unavailable, time.Hour, true,
			rebound.RetryInfo{Safety: rebound.SafetyYes, ServerStop: true}},
		{"required, present", rebound.RetryInfo{}, serviceconfig.ResourceExhausted, time.Second, true, rebound.RetryInfo{Safety: rebound.SafetyYes, MinDelay: time.Second}},
		{"required, absent", yes, serviceconfig.ResourceExhausted, 0, false, rebound.RetryInfo{}},
		{"committed stays", rebound.RetryInfo{Safety: rebound.SafetyYes, Committed: true}, serviceconfig.Unavailable, time.Second, true,
			rebound.RetryInfo{Safety: rebound.SafetyYes, Committed: true, MinDelay: time.Second}},
	} {
		if got := h.Apply(tc.info, tc.code, tc.delay, tc.has); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := (a6.Hints{}).Apply(yes, serviceconfig.Unavailable, time.Minute+1, true); !errors.Is(got.Stop, rebound.ErrRetryDelayTooLong) {
		t.Errorf("the default cap is not 60s: %+v", got)
	}
}

// FuzzRetryDelay: no RetryInfo a server sends makes RetryDelay panic or
// return a negative delay.
func FuzzRetryDelay(f *testing.F) {
	f.Add(int64(1), int32(0))
	f.Add(int64(-1), int32(0))
	f.Add(int64(0), int32(-1))
	f.Add(int64(1<<62), int32(999_999_999))
	f.Fuzz(func(t *testing.T, s int64, n int32) {
		d, ok := a6.RetryDelay(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: s, Nanos: n}})
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("RetryDelay(%d s, %d ns) = %v, %v", s, n, d, ok)
		}
	})
}
