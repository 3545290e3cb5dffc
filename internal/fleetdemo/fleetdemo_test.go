package fleetdemo

import (
	"bytes"
	"context"
	"flag"
	"os"
	"testing"

	"github.com/rebound-go/rebound/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

var svgOut = flag.String("svg", "", "write the chart of a 300-client run to this file (docs/fleet.svg)")

// Hundreds of ClientConns, each with its own adaptive throttle, offer one
// call each per round against a server that admits 16 at a time. The
// server accepts exactly its limit every round and never holds more; the
// attempts reaching it fall from one per client to a small multiple of
// what it accepts, as the throttles learn.
func TestLoopback(t *testing.T) {
	c := Config{Clients: 300, Rounds: 12, Limit: 16, Seed: 1}
	if testing.Short() {
		c.Clients, c.Rounds = 120, 8
	}
	// No deadline of its own: with the CPUs saturated by other processes
	// the run took a minute where an idle machine takes a few seconds,
	// and go test's -timeout stops one that hangs.
	rounds, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rounds {
		t.Logf("round %2d: %d calls, %d reached the server, %d accepted, %d shed, %d kept home", i+1, r.Calls, r.Offered, r.Accepted, r.Shed, r.RejectedLocally)
		if r.MaxInFlight > c.Limit {
			t.Errorf("round %d: %d calls in the handler at once, limit %d", i+1, r.MaxInFlight, c.Limit)
		}
		if r.Offered >= c.Limit && r.Accepted != c.Limit {
			t.Errorf("round %d: %d attempts reached the server, %d accepted; want the limit, %d", i+1, r.Offered, r.Accepted, c.Limit)
		}
		// Every call either reached the server or was kept home; a shed
		// call may have been retried once invited.
		if r.Offered+r.RejectedLocally < r.Calls {
			t.Errorf("round %d: %d calls, %d reached the server, %d kept home", i+1, r.Calls, r.Offered, r.RejectedLocally)
		}
	}
	first, last := rounds[0], rounds[len(rounds)-1]
	// A fresh throttle sends every first attempt (a retry the server
	// invites may already be kept home).
	if first.Offered < first.Calls {
		t.Errorf("first round: %d of %d calls reached the server; want all", first.Offered, first.Calls)
	}
	// The throttles let through about K = 2 attempts per accept over
	// their window; well under half of the calls reach the server by the
	// last round.
	if last.Offered*2 > last.Calls {
		t.Errorf("last round: %d of %d calls reached the server; the clients did not back off", last.Offered, last.Calls)
	}
	if *svgOut != "" {
		var b bytes.Buffer
		if _, err := Chart(c, rounds).WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*svgOut, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
