package shedrule

import (
	"fmt"
	"testing"
	"time"
)

func defaults() Config {
	return Config{InitialLimit: 20, MinLimit: 1, MaxLimit: 1000, Tolerance: 1.5, RetryShare: 0.1, Window: time.Second}
}

// serve admits one request of m from peer at *now, lets lat pass and
// ends it as served.
func serve(t *testing.T, l *Limiter, now *time.Time, m *Method, name string, peer uint64, lat time.Duration) {
	t.Helper()
	var r Request
	if v := l.Admit(*now, m, name, peer, 0.5, &r); !v.Admitted {
		t.Fatalf("shed at %v: %+v", *now, v)
	}
	*now = now.Add(lat)
	l.End(*now, &r, true)
}

func within(got, want time.Duration, frac float64) bool {
	d := got - want
	return d.Abs() <= time.Duration(frac*float64(want))
}

// The baseline is a median, not a minimum: one fast request among many
// does not move it.
func TestBaselineIsRobust(t *testing.T) {
	l := NewLimiter(defaults())
	m := l.Method("/svc/Heavy")
	now := t0
	for i := range 200 {
		serve(t, l, &now, m, "", uint64(i%16), 10*time.Millisecond)
		if i == 100 {
			serve(t, l, &now, m, "", 99, 10*time.Microsecond)
		}
	}
	if b := m.Baseline(); !within(b, 10*time.Millisecond, 0.05) {
		t.Fatalf("baseline %v, want about 10ms", b)
	}
}

// One peer among several cannot pull the baseline down, however many
// fast requests it makes: it adds at most 16 samples plus an eighth of an
// interval's. (All from one peer, nothing tells it from the others.)
func TestBaselineOnePeer(t *testing.T) {
	for _, tc := range []struct {
		honestPeers int
		moved       bool
	}{{8, false}, {1, true}} {
		t.Run(fmt.Sprint(tc.honestPeers, " honest peers"), func(t *testing.T) {
			l := NewLimiter(defaults())
			m := l.Method("/svc/Get")
			now := t0
			// 30s: every 10ms, one honest request of 50ms starts, and
			// three of 10µs from the attacker (peer 1000, or the honest
			// one), three quarters of the requests.
			attacker := uint64(1000)
			if tc.honestPeers == 1 {
				attacker = 0
			}
			var honest [5]Request
			for i := range 3000 {
				h := &honest[i%5]
				if i >= 5 {
					l.End(now, h, true) // began 50ms ago
				}
				l.Admit(now, m, "", uint64(i%tc.honestPeers), 0.5, h)
				for range 3 {
					serve(t, l, &now, m, "", attacker, 10*time.Microsecond)
				}
				now = now.Add(10*time.Millisecond - 30*time.Microsecond)
			}
			b := m.Baseline()
			if moved := b < 25*time.Millisecond; moved != tc.moved {
				t.Fatalf("baseline %v with 3 of every 4 requests at 10µs from one peer: moved %v, want %v", b, moved, tc.moved)
			}
		})
	}
}

// Each method has a baseline of its own: a cheap one does not make a heavy
// one look queued. A method gets its own record only once a request of
// it was served.
func TestBaselinePerMethod(t *testing.T) {
	l := NewLimiter(defaults())
	now := t0
	for i := range 300 {
		serve(t, l, &now, nil, "/svc/Health", uint64(i), 10*time.Microsecond)
		serve(t, l, &now, nil, "/svc/Heavy", uint64(i), 50*time.Millisecond)
	}
	if b := l.Method("/svc/Heavy").Baseline(); !within(b, 50*time.Millisecond, 0.05) {
		t.Fatalf("heavy baseline %v, want about 50ms", b)
	}
	if b := l.Method("/svc/Health").Baseline(); !within(b, 10*time.Microsecond, 0.05) {
		t.Fatalf("health baseline %v, want about 10µs", b)
	}
	// Requests of methods that never succeed make no record.
	for i := range 2 * MaxMethods {
		var r Request
		l.Admit(now, nil, fmt.Sprint("/junk/", i), 0, 0.5, &r)
		l.End(now, &r, false)
	}
	if l.nmethods != 2 {
		t.Fatalf("%d methods recorded, want 2", l.nmethods)
	}
	// Beyond MaxMethods served ones, new methods share one record.
	for i := range MaxMethods {
		serve(t, l, &now, nil, fmt.Sprint("/many/", i), 0, time.Millisecond)
	}
	if l.nmethods != MaxMethods || l.Method("/another") != l.other {
		t.Fatalf("%d methods recorded, want at most %d", l.nmethods, MaxMethods)
	}
}

// A wait on the client frees the slot and is not latency; waits may
// overlap (a receive and a send at once); a wait after the end does
// nothing.
func TestWait(t *testing.T) {
	c := defaults()
	c.InitialLimit, c.MaxLimit = 1, 1
	l := NewLimiter(c)
	m := l.Method("/svc/Upload")
	now := t0
	for range 20 {
		var r Request
		l.Admit(now, m, "", 1, 0.5, &r)
		l.Wait(now, &r)
		l.Wait(now, &r)
		if l.InFlight() != 0 {
			t.Fatalf("in flight %d while waiting", l.InFlight())
		}
		var other Request
		if v := l.Admit(now, m, "", 2, 0.5, &other); !v.Admitted {
			t.Fatal("a request shed beside one waiting on its client")
		}
		l.End(now, &other, false)
		now = now.Add(time.Second)
		l.Unwait(now, &r)
		if l.InFlight() != 0 {
			t.Fatal("a wait ended while another lasts")
		}
		l.Unwait(now, &r)
		if l.InFlight() != 1 {
			t.Fatalf("in flight %d after the waits", l.InFlight())
		}
		now = now.Add(2 * time.Millisecond)
		l.End(now, &r, true)
		l.Wait(now, &r)
		l.Unwait(now, &r)
		l.End(now, &r, true)
		if l.InFlight() != 0 {
			t.Fatalf("in flight %d after the end", l.InFlight())
		}
	}
	if b := m.Baseline(); !within(b, 2*time.Millisecond, 0.05) {
		t.Fatalf("baseline %v, want the 2ms of work, not the second of waiting", b)
	}
	// A request that ends while waiting gives its slot back once.
	var r Request
	l.Admit(now, m, "", 1, 0.5, &r)
	l.Wait(now, &r)
	l.End(now.Add(time.Second), &r, true)
	if l.InFlight() != 0 || m.Baseline() > 3*time.Millisecond {
		t.Fatalf("in flight %d, baseline %v after a request ended waiting", l.InFlight(), m.Baseline())
	}
}

// Refusals count in the share as sheds do, and get the same pushback;
// the gate sheds at the limit and takes no slot below it.
func TestRefuseAndGate(t *testing.T) {
	c := defaults()
	c.InitialLimit, c.MaxLimit = 2, 2
	l := NewLimiter(c)
	now := t0
	for range 16 {
		serve(t, l, &now, nil, "/svc/Get", 1, 10*time.Millisecond)
	}
	var a, b Request
	l.Admit(now, nil, "/svc/Get", 1, 0.5, &a)
	if v := l.Gate(now, "/svc/Get", 0.5); !v.Admitted || l.InFlight() != 1 {
		t.Fatalf("gate below the limit: %+v, in flight %d", v, l.InFlight())
	}
	l.Admit(now, nil, "/svc/Get", 1, 0.5, &b)
	// 18 admitted; one refused: 1 of 18, a delay of about 10ms.
	if v := l.Refuse(now, &a, 0.5); v.Stop || !within(v.Delay, 10*time.Millisecond, 0.05) {
		t.Fatalf("first refusal: %+v, want a delay of about 10ms", v)
	}
	// At the limit the gate sheds: 2 of 19, beyond a tenth: stop.
	if v := l.Gate(now, "/svc/Get", 0.5); v.Admitted || !v.Stop {
		t.Fatalf("gate at the limit: %+v, want stop", v)
	}
	l.End(now, &a, false)
	if l.Refused != 1 || l.ShedStop != 1 || l.Admitted != 18 {
		t.Fatalf("counts: %d refused, %d shed, %d admitted", l.Refused, l.ShedStop, l.Admitted)
	}
	l.End(now, &b, true)
}
