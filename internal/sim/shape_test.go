package sim

import (
	"reflect"
	"testing"
	"time"
)

// shaped is small() with the outage of shape s: 100 req/s against 150/s
// (15 workers), down from 10s to 20s of a 30s run.
func shaped(s Shape, outageCapacity float64) Config {
	c := small()
	c.Shape, c.OutageCapacity, c.AttackRate = s, outageCapacity, s.DefaultAttackRate()
	return c
}

// Each shape does to the server what it says, which shows first without
// retries: where attempts fail, wait or go through, and whether a queue
// holds them past their deadline.
func TestShapes(t *testing.T) {
	for _, tc := range []struct {
		shape    Shape
		capacity float64
		check    func(t *testing.T, c Config, none, shed Result)
	}{
		{Refuse, 0.5, func(t *testing.T, c Config, none, _ Result) {
			// No queue: what the 7 workers left cannot take fails at
			// once, and a success takes the work's time.
			if none.Refused == 0 || none.PastDeadline != 0 || none.P99 != c.Latency {
				t.Errorf("refused %d, past the deadline %d, p99 %v", none.Refused, none.PastDeadline, none.P99)
			}
		}},
		{Slow, 0.5, func(t *testing.T, c Config, none, shed Result) {
			// 100 req/s into 75/s: the queue grows by 25 a second and
			// reaches the 10s deadline only after the outage, so nothing
			// fails; requests wait seconds. The shedder keeps the wait
			// within its tolerance and sheds instead.
			if none.Refused != 0 || none.Succeeded != none.Requests || none.P99 < 2*time.Second {
				t.Errorf("refused %d, %d of %d succeeded, p99 %v", none.Refused, none.Succeeded, none.Requests, none.P99)
			}
			if shed.P99 > 5*c.Latency || shed.Shed == 0 {
				t.Errorf("shed: p99 %v, %d shed", shed.P99, shed.Shed)
			}
		}},
		{Hang, 0, func(t *testing.T, c Config, none, shed Result) {
			// Every attempt of the outage hangs: the first of them reach
			// their 10s deadline just as it ends, and the others are
			// served after it, their time to success stretched by the
			// hang; the server never refuses.
			if none.Refused != 0 || none.PastDeadline == 0 || none.Succeeded+none.PastDeadline != none.Requests || none.P99 < 5*time.Second {
				t.Errorf("refused %d, past the deadline %d, %d of %d succeeded, p99 %v", none.Refused, none.PastDeadline, none.Succeeded, none.Requests, none.P99)
			}
			// The shedder sheds what finds its limit held by the hung.
			if shed.Shed == 0 || shed.OutageAmplification > 1.1 {
				t.Errorf("shed: %d shed, %.2fx in the outage", shed.Shed, shed.OutageAmplification)
			}
		}},
		{FailFast, 0.5, func(t *testing.T, c Config, none, shed Result) {
			// Half the outage's attempts fail at once, and only they.
			if none.Refused == 0 || none.PastDeadline != 0 || none.Refused != none.Requests-none.Succeeded ||
				none.Refused < none.OutageRequests*4/10 || none.Refused > none.OutageRequests*6/10 {
				t.Errorf("refused %d of %d in the outage, %d failed", none.Refused, none.OutageRequests, none.Requests-none.Succeeded)
			}
			// The shedder speaks for them: past a tenth, "don't retry".
			if shed.PushedBack == 0 || shed.OutageAmplification > 1.1 {
				t.Errorf("shed: %d told to stop, %.2fx", shed.PushedBack, shed.OutageAmplification)
			}
		}},
		{FastCalls, 0, func(t *testing.T, c Config, none, shed Result) {
			// The attacker's calls take no worker: nothing changes for
			// the honest clients, with the shedder or without.
			if none.Succeeded != none.Requests || shed.Succeeded != shed.Requests || shed.Shed != 0 {
				t.Errorf("%d and %d of %d succeeded, %d shed", none.Succeeded, shed.Succeeded, none.Requests, shed.Shed)
			}
		}},
		{SlowClients, 0, func(t *testing.T, c Config, none, shed Result) {
			// Slow clients hold no worker while they send nothing, then
			// ask 100 requests a second more: 200/s against 150/s.
			// Without a shedder the queue grows; with it, the honest
			// clients lose about what they would to any other load.
			if none.Succeeded != none.Requests || none.P99 < time.Second {
				t.Errorf("%d of %d succeeded, p99 %v", none.Succeeded, none.Requests, none.P99)
			}
			if shed.P99 > 5*c.Latency {
				t.Errorf("shed: p99 %v", shed.P99)
			}
		}},
	} {
		t.Run(tc.shape.String(), func(t *testing.T) {
			c := shaped(tc.shape, tc.capacity)
			r := run(t, c)
			checkInvariants(t, r)
			none, shed := r.Results[NoRetries], r.Results[Shed]
			t.Logf("no retries: %d of %d succeeded, %d refused, %d past the deadline, p99 %v, recovery %v (%v)",
				none.Succeeded, none.Requests, none.Refused, none.PastDeadline, none.P99, none.Recovery, none.Recovered)
			t.Logf("shed: %d of %d succeeded, %d shed, %d refused, %.2fx in the outage, p99 %v, recovery %v (%v)",
				shed.Succeeded, shed.Requests, shed.Shed, shed.Refused, shed.OutageAmplification, shed.P99, shed.Recovery, shed.Recovered)
			tc.check(t, c, none, shed)
			// A server that queues drops an attempt at its request's
			// deadline: nothing succeeds later than that.
			if tc.shape.queues() {
				for _, res := range r.Results {
					if res.P99 > c.Deadline {
						t.Errorf("%v: p99 %v past the %v deadline", res.Policy, res.P99, c.Deadline)
					}
				}
			}
			// The same config gives the same report. With -short the
			// second run simulates the two policies judged above alone
			// (each policy's run depends on no other's); a full run
			// repeats every policy.
			if testing.Short() {
				if again := runPolicies(t, c, NoRetries, Shed); !reflect.DeepEqual([]Result{none, shed}, again) {
					t.Error("the same config gave different results")
				}
			} else if again := run(t, c); !reflect.DeepEqual(r, again) {
				t.Error("the same config gave different reports")
			}
		})
	}
}

// Recovery is the time from the outage's end until the requests arriving
// succeed as often as before, or never.
func TestRecovery(t *testing.T) {
	c := small()
	arr := []arrival{}
	for at := time.Duration(0); at < c.Duration; at += 10 * time.Millisecond {
		arr = append(arr, arrival{at: at})
	}
	succeeded := make([]int32, recoverySteps(c))
	for _, tc := range []struct {
		name string
		ok   func(at time.Duration) bool
		want time.Duration
		rec  bool
	}{
		{"at once", func(at time.Duration) bool { return at < 10*time.Second || at >= 20*time.Second }, 0, true},
		// From 22.9s, 90 of the second's 100 arrivals succeed.
		{"after 3s", func(at time.Duration) bool { return at < 10*time.Second || at >= 23*time.Second }, 2900 * time.Millisecond, true},
		// 90% of the share before: 9 of 10 succeeding is enough.
		{"nine in ten", func(at time.Duration) bool { return at < 10*time.Second || at%(100*time.Millisecond) != 0 }, 0, true},
		{"eight in ten", func(at time.Duration) bool { return at < 10*time.Second || at%(50*time.Millisecond) != 0 }, 0, false},
		{"never", func(at time.Duration) bool { return at < 10*time.Second }, 0, false},
	} {
		clear(succeeded)
		for _, a := range arr {
			if tc.ok(a.at) {
				succeeded[recoveryStepOf(c, a.at)]++
			}
		}
		if d, ok := recovery(c, arr, succeeded); d != tc.want || ok != tc.rec {
			t.Errorf("%s: recovery %v (%v), want %v (%v)", tc.name, d, ok, tc.want, tc.rec)
		}
	}
	c.OutageLength = 0
	if d, ok := recovery(c, arr, succeeded); d != 0 || !ok {
		t.Errorf("no outage: recovery %v (%v)", d, ok)
	}
}
