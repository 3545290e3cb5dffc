package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/rebound-go/rebound/internal/fleetdemo"
	"github.com/rebound-go/rebound/internal/svgplot"
)

// runFleetDemo is `rebound demo -fleet`: hundreds of gRPC clients, each
// with its own adaptive throttle, against one server behind a Shedder,
// on loopback. It prints what each round saw, writes the chart to svg and
// a page of it all to html ("" for none).
func runFleetDemo(ctx context.Context, c fleetdemo.Config, svg, html string, stdout, stderr io.Writer) int {
	if c.Clients < 1 || c.Clients > 2000 || c.Rounds < 1 || c.Rounds > 100 || c.Limit < 1 || c.Limit > c.Clients {
		return demoHelp.fail(stderr, "-fleet needs -fleet-clients in [1, 2000], -fleet-rounds in [1, 100] and -fleet-limit in [1, clients], got %d, %d, %d",
			c.Clients, c.Rounds, c.Limit)
	}
	if err := checkOutputs(map[string]string{"svg": svg, "html": html}); err != nil {
		return demoHelp.fail(stderr, "%v", err)
	}
	rounds, err := fleetdemo.Run(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "rebound demo: -fleet: %v\n", err)
		return 1
	}
	intro := fmt.Sprintf("%d gRPC clients on loopback, each with its own grpcretry.Client, adaptive throttle and server name, "+
		"against one grpc-go server behind shed.Shedder with its limit fixed at %d. Every round each client "+
		"makes one call; the admitted calls are held until the rest of the round has been shed or kept home.", c.Clients, c.Limit)
	fmt.Fprintf(stdout, "%s\n\n", wrap(intro, 100))
	table := fleetDemoTable(rounds)
	writeTable(stdout, table)
	first, last := rounds[0], rounds[len(rounds)-1]
	concl := conclusion{Headlines: []string{
		fmt.Sprintf("Server load: the server accepted at most its limit of %d every round.", c.Limit),
		fmt.Sprintf("Client load: the attempts reaching the server fell from %d in round 1 to %d in round %d: "+
			"the clients' throttles keep home what the server would only refuse.", first.Offered, last.Offered, len(rounds)),
	}}
	fmt.Fprintln(stdout)
	concl.print(stdout)
	chart := fleetdemo.Chart(c, rounds)
	if svg != "" {
		if err := writeFigures(svg, chart); err != nil {
			fmt.Fprintf(stderr, "rebound demo: -svg: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nChart (calls, attempts reaching the server and accepted, per round): %s\n", svg)
	}
	if html != "" {
		r := htmlReport{
			Title: "rebound demo -fleet", Scenario: []string{intro}, Conclusion: concl,
			Tables: []htmlTable{{Caption: "Rounds", Rows: table}},
			Notes:  []string{fleetDemoLegend},
			Charts: []svgplot.Figure{chart},
		}
		if err := r.write(html); err != nil {
			fmt.Fprintf(stderr, "rebound demo: -html: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "Report (table, chart, conclusion): %s\n", html)
	}
	return 0
}

const fleetDemoLegend = "calls: calls the clients made, one each; to server: attempts that reached the server, retries included; " +
	"accepted and shed: what the Shedder did with them; kept home: calls the clients' throttles rejected before sending; " +
	"max in flight: the most calls the server held at once."

// fleetDemoTable returns the rounds as a table, headings first.
func fleetDemoTable(rounds []fleetdemo.Round) [][]string {
	t := [][]string{{"round", "calls", "to server", "accepted", "shed", "kept home", "max in flight"}}
	for i, r := range rounds {
		t = append(t, []string{strconv.Itoa(i + 1), strconv.Itoa(r.Calls), strconv.Itoa(r.Offered), strconv.Itoa(r.Accepted),
			strconv.Itoa(r.Shed), strconv.Itoa(r.RejectedLocally), strconv.Itoa(r.MaxInFlight)})
	}
	return t
}
