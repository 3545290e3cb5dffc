package shedload

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// protocols are the protocols a test runs in: all of them, or in -short
// mode gRPC alone (package shed's own tests cover each protocol's front
// door).
func protocols() []Protocol {
	if testing.Short() {
		return []Protocol{GRPC}
	}
	return Protocols
}

// honest is the honest workload: 16 clients back to back, 50ms
// per request, on a server of 40 slots: 60% of its capacity is free.
func honest(p Protocol, d time.Duration) Scenario {
	return Scenario{Protocol: p, Slots: 40, Work: 50 * time.Millisecond, Honest: 16, Duration: d}
}

// attackTimes: the attack runs in [1s, 3s) of a 4s run; the honest calls
// are judged from its start to the end of the run, a second after it.
func attackTimes(testing.TB) (start, end, run time.Duration) {
	if testing.Short() {
		return 500 * time.Millisecond, 1500 * time.Millisecond, 2500 * time.Millisecond
	}
	return time.Second, 3 * time.Second, 4 * time.Second
}

// compare runs sc with and without the Shedder (at once, see Compare),
// up to three times, until the run without it was healthy: healthy says
// whether the machine carried the scenario's honest load, at about the
// latency the backend gives it. A machine too busy for that adds queueing of its
// own, which the Shedder rightly reads as overload; the scenario then
// does not apply, and after three tries the test is skipped, saying so.
func compare(t *testing.T, sc Scenario, healthy func(without *Report) bool) (without, with *Report) {
	t.Helper()
	for try := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var err error
		without, with, err = Compare(ctx, sc)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("without: %s", without.Summary())
		t.Logf("with:    %s", with.Summary())
		if healthy(without) {
			return without, with
		}
		t.Logf("try %d: the machine did not carry the honest load even without the Shedder", try+1)
	}
	t.Skip("the machine is too busy to run this scenario")
	return nil, nil
}

// checkAttack runs sc with and without the Shedder and fails unless the
// honest clients fare at least as well with it, as the issue has it:
// at most 10% of their calls shed, goodput at least 80% of the run
// without the Shedder, from the attack's start to the end of the run.
func checkAttack(t *testing.T, sc Scenario) {
	t.Helper()
	start, end, run := attackTimes(t)
	sc.AttackStart, sc.AttackEnd, sc.Duration = start, end, run
	// Before the attack the service must have taken about its work's
	// time: a machine so busy that it adds half is queueing, which the
	// Shedder rightly sheds.
	without, with := compare(t, sc, func(r *Report) bool {
		return r.Started(0, start).OK >= 50 && r.ServiceLatency(0, start) <= sc.Work*3/2
	})
	bare, shed := without.Started(start, run), with.Started(start, run)
	g0, g1 := without.Goodput(start, run), with.Goodput(start, run)
	after := with.Started(end, run)
	t.Logf("honest calls from the attack on: %.1f%% shed (without: %.1f%%), goodput %.1f/s against %.1f/s; after the attack: %.1f%% shed",
		100*shed.ShedShare(), 100*bare.ShedShare(), g1, g0, 100*after.ShedShare())
	if shed.ShedShare() > 0.10 || g1 < 0.8*g0 {
		t.Errorf("%v: with the Shedder, %.1f%% of the honest calls shed and goodput %.1f/s, against %.1f/s without: want at most 10%% and at least 80%%",
			sc.Protocol, 100*shed.ShedShare(), g1, g0)
	}
}

// Item 1: calls that end at once, unauthenticated or cut short by their
// deadline, say nothing of the server's work.
func TestAttackFastFailures(t *testing.T) {
	for _, p := range protocols() {
		t.Run(p.String()+"/unauthenticated", func(t *testing.T) {
			sc := honest(p, 0)
			sc.Attack = Every(200*time.Millisecond, 5, ModeUnauthenticated, 0)
			checkAttack(t, sc)
		})
		t.Run(p.String()+"/deadline", func(t *testing.T) {
			sc := honest(p, 0)
			sc.Attack = Every(500*time.Millisecond, 1, "", 2*time.Millisecond)
			checkAttack(t, sc)
		})
	}
}

// Item 2: clients that send nothing hold no slot.
func TestAttackSlowClients(t *testing.T) {
	for _, p := range protocols() {
		t.Run(p.String()+"/idle", func(t *testing.T) {
			sc := honest(p, 0)
			n := 1000
			if p != GRPC {
				n = 200 // a connection each
			}
			sc.Attack = IdleStreams(n, 4)
			checkAttack(t, sc)
		})
		if p == GRPC {
			continue
		}
		t.Run(p.String()+"/upload", func(t *testing.T) {
			sc := honest(p, 0)
			sc.Attack = SlowUploads(200, 1<<20)
			checkAttack(t, sc)
		})
	}
}

// Item 3: refusals aimed at one client, a few hundred a second.
func TestAttackRefusals(t *testing.T) {
	for _, p := range protocols() {
		for _, mode := range []string{ModeQuota, ModeShard} {
			t.Run(p.String()+"/"+mode, func(t *testing.T) {
				sc := honest(p, 0)
				sc.Attack = Every(10*time.Millisecond, 3, mode, 0)
				checkAttack(t, sc)
			})
		}
	}
}

// fleet is the fleet: 200 client processes, each with its own
// retrying client (5 attempts on UNAVAILABLE), offering 75% of the
// capacity of a server of 40 slots of 200ms (200 calls/s), through an
// outage of 1.5s.
func fleet(p Protocol, shape Shape) Scenario {
	sc := Scenario{Protocol: p, Slots: 40, Work: 200 * time.Millisecond, Fleet: 200, Rate: 0.75, Attempts: 5,
		Deadline: 2 * time.Second, Duration: 6 * time.Second, Seed: 1,
		Outage: Outage{Shape: shape, Start: 2 * time.Second, Length: 1500 * time.Millisecond}}
	if testing.Short() {
		sc.Fleet, sc.Rate = 100, 1.5
		sc.Duration, sc.Outage.Start = 5*time.Second, 1500*time.Millisecond
	}
	return sc
}

// outageHealthy: the machine carried the fleet's load without the
// Shedder: before the outage, at about the backend's latency (within the
// Shedder's tolerance, 1.5), and after it, back within 2s.
func outageHealthy(r *Report) bool {
	o := r.Scenario.Outage
	d, ok := r.Recovery()
	return r.PreOutage() >= 0.9 && r.ServiceLatency(max(o.Start-time.Second, 0), o.Start) <= r.Scenario.Work*3/2 &&
		ok && d <= 2*time.Second
}

// Items 7 and 8: in every outage shape, the fleet's attempts per call
// during the outage stay within 1.1x, and the calls succeed as often as
// before within 2s of the outage's end (or, on a machine so busy that
// the run without the Shedder takes longer, within half a second of it).
func TestOutages(t *testing.T) {
	for _, p := range protocols() {
		for _, shape := range []Shape{CapacityHalved, Hang, FailFast} {
			t.Run(p.String()+"/"+shape.String(), func(t *testing.T) {
				without, with := compare(t, fleet(p, shape), outageHealthy)
				if a := with.OutageAttempts(); a > 1.1 {
					t.Errorf("%.2fx attempts per call during the outage, want at most 1.1x (without the Shedder: %.2fx)", a, without.OutageAttempts())
				}
				d0, _ := without.Recovery()
				d1, ok1 := with.Recovery()
				if !ok1 || d1 > 2*time.Second && d1 > d0+500*time.Millisecond {
					t.Errorf("recovery %v (recovered %v), without the Shedder %v: want within 2s", d1, ok1, d0)
				}
			})
		}
	}
}

// Items 7 and 8 in the smaller fleet: 50 client processes on a
// backend of 8 slots of 40ms (200 calls/s), offering 75% of it, while
// half the requests fail fast. The limit used to collapse to 2-3 and the
// goodput fell below that of neither shedding nor retries. With the
// Shedder the goodput during the outage is at least 80% of that, the
// attempts per call within 1.1x, and goodput comes back within 2s.
func TestHalfFailFast(t *testing.T) {
	sc := Scenario{Protocol: GRPC, Slots: 8, Work: 40 * time.Millisecond, Fleet: 50, Rate: 3, Attempts: 5,
		Deadline: 2 * time.Second, Duration: 6500 * time.Millisecond, Seed: 2,
		Outage: Outage{Shape: FailFast, Share: 0.5, Start: 2 * time.Second, Length: 2 * time.Second}}
	if testing.Short() {
		sc.Duration, sc.Outage.Start, sc.Outage.Length = 4*time.Second, time.Second, 1500*time.Millisecond
	}
	without, with := compare(t, sc, outageHealthy)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	neither := sc
	neither.Attempts = 1
	plain, err := Run(ctx, neither)
	if err != nil {
		t.Fatal(err)
	}
	o := sc.Outage
	for _, r := range []*Report{plain, without, with} {
		t.Logf("%s; goodput during the outage %.1f/s", r.Summary(), r.Goodput(o.Start, o.End()))
	}
	if g0, g1 := plain.SuccessShare(o.Start, o.End()), with.SuccessShare(o.Start, o.End()); g1 < 0.8*g0 {
		t.Errorf("%.0f%% of the calls made during the outage succeeded with the Shedder, %.0f%% with neither shedding nor retries", 100*g1, 100*g0)
	}
	if a := with.OutageAttempts(); a > 1.1 {
		t.Errorf("%.2fx attempts per call during the outage, want at most 1.1x", a)
	}
	d0, _ := without.Recovery()
	if d1, ok := with.Recovery(); !ok || d1 > 2*time.Second && d1 > d0+500*time.Millisecond {
		t.Errorf("recovery %v (%v), want within 2s", d1, ok)
	}
}

// Item 1, from one client: a peer that sends cheap requests that succeed
// at once, three times as many as the honest clients send, cannot pull
// the baseline down. The honest clients call from 8 addresses, the
// attacker from one.
func TestAttackCheapSuccesses(t *testing.T) {
	for _, p := range protocols() {
		t.Run(p.String(), func(t *testing.T) {
			sc := honest(p, 0)
			sc.HonestIPs = 8
			sc.Attack = Every(10*time.Millisecond, 10, ModeCheap, 0)
			checkAttack(t, sc)
		})
	}
}
