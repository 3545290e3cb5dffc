package sim

import (
	"fmt"
	"time"
)

// Shape is what goes wrong during the outage, [Config.OutageStart] to
// OutageStart + OutageLength: the server losing capacity in one of the
// ways servers do, or an attacker calling beside the honest clients.
//
// Two kinds of server: in the Refuse shape, as in issue 19's model, the
// server has no queue and an attempt that finds no worker free fails at
// once; in every other shape it queues such an attempt until a worker
// frees, so that its requests slow down as it fills, and drops it when its
// request's deadline passes (its client has gone), as a gRPC server whose
// handler watches its context does.
type Shape int

// The shapes, in the order of [Shapes].
const (
	// Refuse is a server with no queue: an attempt that finds none of
	// the serving workers free fails at once with UNAVAILABLE, as a
	// handler whose pool or dependency is exhausted fails fast. During
	// the outage only [Config.OutageCapacity] of the workers serve (0:
	// a dependency is down and every attempt fails at once).
	Refuse Shape = iota
	// Slow is capacity lost: during the outage only OutageCapacity of
	// the workers serve, and the attempts they cannot take at once queue
	// for them, so requests slow down.
	Slow
	// Hang is requests hanging: during the outage an attempt hangs until
	// the outage ends, or its deadline passes, and is then served; the
	// attempts it spares, OutageCapacity of them at random, are served as
	// usual.
	Hang
	// FailFast is a dependency failing fast: during the outage an attempt
	// fails at once with UNAVAILABLE, carrying no pushback of its own,
	// without taking a worker; the attempts it spares, OutageCapacity of
	// them at random, are served as usual.
	FailFast
	// FastCalls is an attacker (issue 29, item 1): during the outage one
	// client beside the others sends [Config.AttackRate] calls a second
	// that end at once without taking a worker, every other one failing
	// (UNAUTHENTICATED, or cut short by its deadline) and the rest
	// succeeding. The server keeps its capacity.
	FastCalls
	// SlowClients is slow clients (issue 29, item 2): during the outage
	// they open AttackRate streams a second, each of which sends nothing
	// for [SlowHold] and then its request, which the server serves as any
	// other. The server keeps its capacity.
	SlowClients
)

// Shapes lists every shape.
var Shapes = [...]Shape{Refuse, Slow, Hang, FailFast, FastCalls, SlowClients}

// SlowHold is how long a slow client of [SlowClients] holds its stream
// before it sends its request.
const SlowHold = 10 * time.Second

// fastCallTime is how long a call of [FastCalls] takes on the server.
const fastCallTime = 10 * time.Microsecond

// String returns the shape's name, as the command line spells it:
// "refuse", "slow", "hang", "fail-fast", "fast-calls" or "slow-clients".
func (s Shape) String() string {
	switch s {
	case Refuse:
		return "refuse"
	case Slow:
		return "slow"
	case Hang:
		return "hang"
	case FailFast:
		return "fail-fast"
	case FastCalls:
		return "fast-calls"
	case SlowClients:
		return "slow-clients"
	}
	return fmt.Sprintf("Shape(%d)", int(s))
}

// Describe returns a few words on what s does, for a legend.
func (s Shape) Describe() string {
	switch s {
	case Refuse:
		return "the server has no queue and refuses at once what its serving workers cannot take"
	case Slow:
		return "capacity lost: the server queues what its serving workers cannot take, and requests slow down"
	case Hang:
		return "requests hang until the outage ends or their deadline passes"
	case FailFast:
		return "a dependency fails fast: attempts fail at once with UNAVAILABLE, no pushback of their own"
	case FastCalls:
		return "an attacker: one client's calls that end at once, half failing, half succeeding without work"
	case SlowClients:
		return fmt.Sprintf("slow clients: streams that send nothing for %v, then their request", SlowHold)
	}
	return s.String()
}

// ParseShape returns the shape that String spells name.
func ParseShape(name string) (Shape, error) {
	for _, s := range Shapes {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("sim: unknown shape %q", name)
}

// DefaultAttackRate is the attack rate of the fleet table's row of s:
// 6000 fast calls a second, whose 3000 successes are three times the
// honest clients' 1000 requests; 100 slow streams a second, a thousand
// held at once; 0 for a shape that is not an attacker.
func (s Shape) DefaultAttackRate() float64 {
	switch s {
	case FastCalls:
		return 6000
	case SlowClients:
		return 100
	}
	return 0
}

// queues reports whether the server of s queues what its workers cannot
// take at once.
func (s Shape) queues() bool { return s != Refuse }

// attacks reports whether s is an attacker rather than an outage: the
// server keeps its capacity.
func (s Shape) attacks() bool { return s == FastCalls || s == SlowClients }
