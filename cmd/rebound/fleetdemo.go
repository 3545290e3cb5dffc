package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/rebound-go/rebound/internal/fleetdemo"
)

// runFleetDemo is `rebound demo -fleet`: hundreds of gRPC clients, each
// with its own adaptive throttle, against one server behind a Shedder,
// on loopback. It prints what each round saw and writes the chart to svg
// ("" for none).
func runFleetDemo(ctx context.Context, c fleetdemo.Config, svg string, stdout, stderr io.Writer) int {
	if c.Clients < 1 || c.Clients > 2000 || c.Rounds < 1 || c.Rounds > 100 || c.Limit < 1 || c.Limit > c.Clients {
		fmt.Fprintf(stderr, "demo: -fleet needs -fleet-clients in [1, 2000], -fleet-rounds in [1, 100] and -fleet-limit in [1, clients], got %d, %d, %d\n",
			c.Clients, c.Rounds, c.Limit)
		return 2
	}
	rounds, err := fleetdemo.Run(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "demo: -fleet: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%d gRPC clients on loopback, each with its own grpcretry.Client, adaptive throttle and server name,\n", c.Clients)
	fmt.Fprintf(stdout, "against one grpc-go server behind shed.Shedder with its limit fixed at %d. Every round each client\n", c.Limit)
	fmt.Fprintln(stdout, "makes one call; the admitted calls are held until the rest of the round has been shed or kept home.")
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "%5s %7s %9s %9s %6s %10s %13s\n", "round", "calls", "to server", "accepted", "shed", "kept home", "max in flight")
	for i, r := range rounds {
		fmt.Fprintf(stdout, "%5d %7d %9d %9d %6d %10d %13d\n", i+1, r.Calls, r.Offered, r.Accepted, r.Shed, r.RejectedLocally, r.MaxInFlight)
	}
	first, last := rounds[0], rounds[len(rounds)-1]
	fmt.Fprintf(stdout, "\nThe server accepted at most its limit of %d every round, while the attempts reaching it fell\n", c.Limit)
	fmt.Fprintf(stdout, "from %d to %d: the clients' throttles keep home what the server would only refuse.\n", first.Offered, last.Offered)
	if svg == "" {
		return 0
	}
	var b bytes.Buffer
	if _, err := fleetdemo.Chart(c, rounds).WriteTo(&b); err != nil {
		fmt.Fprintf(stderr, "demo: -svg: %v\n", err)
		return 1
	}
	if err := os.WriteFile(svg, b.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "demo: -svg: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nwrote the chart to %s\n", svg)
	return 0
}
