package stretch

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRunDoubles(t *testing.T) {
	var tried []time.Duration
	Run(t, time.Millisecond, time.Second, func(d time.Duration) error {
		tried = append(tried, d)
		if d < 8*time.Millisecond {
			return errors.New("too slow")
		}
		return nil
	})
	if fmt.Sprint(tried) != "[1ms 2ms 4ms 8ms]" {
		t.Fatalf("tried %v, want 1ms to 8ms", tried)
	}
}

// recorder fails the way testing.T does, without ending this test.
type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Failed() bool              { return r.failed }
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Fatalf(f string, a ...any) { r.failed, r.msg = true, fmt.Sprintf(f, a...) }

func TestRunGivesUpAtTheLimit(t *testing.T) {
	r := &recorder{TB: t}
	n := 0
	Run(r, time.Millisecond, 4*time.Millisecond, func(time.Duration) error {
		n++
		return errors.New("too slow")
	})
	if !r.failed || n != 3 || r.msg != "with a margin of 4ms: too slow" {
		t.Fatalf("%d tries, failed %v with %q; want 3 (1ms, 2ms, 4ms) and the last error", n, r.failed, r.msg)
	}
}

func TestRunStopsWhenTheScenarioFailed(t *testing.T) {
	r := &recorder{TB: t}
	n := 0
	Run(r, time.Millisecond, time.Second, func(time.Duration) error {
		n++
		r.failed = true // as t.Error would
		return errors.New("wrong code")
	})
	if n != 1 {
		t.Fatalf("%d tries after the scenario failed the test, want 1", n)
	}
}
