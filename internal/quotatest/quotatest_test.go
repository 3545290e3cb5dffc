package quotatest

import (
	"testing"
	"time"
)

// Enough: unpaced callers are done at the first refusal; paced ones once
// they have run for the time asked and been served the limit, whichever
// comes later.
func TestEnough(t *testing.T) {
	now := time.Now()
	q := &Quota{Limit: 2, Window: time.Hour}
	long := now.Add(-time.Minute) // a start long past
	if q.Enough(false, now, 0) || q.Enough(true, long, time.Second) {
		t.Fatal("done before any request")
	}
	q.Take(now)
	q.Take(now)
	if q.Enough(false, now, 0) {
		t.Error("unpaced callers done with nothing refused")
	}
	if !q.Enough(true, long, time.Second) {
		t.Error("paced callers not done after the run with the limit served")
	}
	if q.Enough(true, now, time.Hour) {
		t.Error("paced callers done before the run's end")
	}
	q.Take(now)
	if !q.Enough(false, now, 0) {
		t.Error("unpaced callers not done after a refusal")
	}
	few := &Quota{Limit: 5, Window: time.Hour}
	few.Take(now)
	if few.Enough(true, long, time.Second) {
		t.Error("paced callers done with 1 of the limit of 5 served")
	}
}

// PacedRun: the paced callers cross the first reset of a 3s window, with
// -short too, and -short runs them no longer.
func TestPacedRun(t *testing.T) {
	window := 3 * time.Second
	full, short := PacedRun(false), PacedRun(true)
	if full <= window || short <= window || short > full {
		t.Fatalf("runs of %v and, with -short, %v; want both past the reset at %v, -short's no longer", full, short, window)
	}
}
