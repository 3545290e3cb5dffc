package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/rebound-go/rebound/internal/shedload"
	"github.com/rebound-go/rebound/internal/svgplot"
)

// fleetShapes are the outage shapes -fleet-shape names, in help order.
var fleetShapes = []struct {
	name  string
	shape shedload.Shape
}{
	{"fail-fast", shedload.FailFast},
	{"capacity-halved", shedload.CapacityHalved},
	{"hang", shedload.Hang},
}

// fleetScenario is the scenario of `rebound demo -fleet`: issue 29's fleet
// (shedload.FleetScenario) with clients processes sharing its 150 calls a
// second, through an outage of the named shape, in the named protocol.
func fleetScenario(protocol, shape string, clients int, seed uint64) (shedload.Scenario, error) {
	i := slices.IndexFunc(fleetShapes, func(s struct {
		name  string
		shape shedload.Shape
	}) bool {
		return s.name == shape
	})
	if i < 0 {
		return shedload.Scenario{}, fmt.Errorf("-fleet-shape: unknown shape %q (want fail-fast, capacity-halved or hang)", shape)
	}
	p := slices.IndexFunc(shedload.Protocols, func(p shedload.Protocol) bool { return p.String() == protocol })
	if p < 0 {
		return shedload.Scenario{}, fmt.Errorf("-fleet-protocol: unknown protocol %q (want grpc, connect or http)", protocol)
	}
	if clients < 1 || clients > 2000 {
		return shedload.Scenario{}, fmt.Errorf("-fleet-clients must be in [1, 2000], got %d", clients)
	}
	sc := shedload.FleetScenario(shedload.Protocols[p], fleetShapes[i].shape)
	sc.Rate = sc.Rate * float64(sc.Fleet) / float64(clients)
	sc.Fleet, sc.Seed = clients, seed
	if fleetDemoAdjust != nil {
		fleetDemoAdjust(&sc)
	}
	return sc, nil
}

// fleetDemoAdjust, when not nil, changes the demo's scenario: tests
// shorten its run with it.
var fleetDemoAdjust func(*shedload.Scenario)

// runFleetDemo is `rebound demo -fleet`: sc's fleet on loopback, through
// its outage, with and without a Shedder in front of the server, both at
// once (shedload.Compare). It prints what each run saw, writes the chart
// to svg and a page of it all to html ("" for none).
func runFleetDemo(ctx context.Context, sc shedload.Scenario, svg, html string, stdout, stderr io.Writer) int {
	if err := checkOutputs(map[string]string{"svg": svg, "html": html}); err != nil {
		return demoHelp.fail(stderr, "%v", err)
	}
	without, with, err := shedload.Compare(ctx, sc)
	if err != nil {
		fmt.Fprintf(stderr, "rebound demo: -fleet: %v\n", err)
		return 1
	}
	o := sc.Outage
	client := map[shedload.Protocol]string{shedload.GRPC: "grpcretry", shedload.Connect: "connectretry", shedload.HTTP: "httpretry"}[sc.Protocol]
	intro := fmt.Sprintf("%d client processes on loopback, each with its own %s client (%d attempts on UNAVAILABLE, a %v deadline), "+
		"offering %.0f calls/s (Poisson arrivals) to a %v server whose backend serves %d at a time, %v each (%.0f calls/s); "+
		"from %v to %v of a %v run, %s. Once without a Shedder and once behind shed.DefaultConfig(), both at once "+
		"(internal/shedload, as its tests run it).",
		sc.Fleet, client, sc.Attempts, sc.Deadline, float64(sc.Fleet)*sc.Rate, sc.Protocol, sc.Slots, sc.Work,
		float64(sc.Slots)/sc.Work.Seconds(), o.Start, o.End(), sc.Duration, fleetShapeWords(o.Shape))
	fmt.Fprintf(stdout, "%s\n\n", wrap(intro, 100))
	table := fleetDemoTable(without, with)
	writeTable(stdout, table)
	concl := fleetDemoConclusion(without, with)
	fmt.Fprintln(stdout)
	concl.print(stdout)
	chart := fleetDemoChart(without, with)
	if svg != "" {
		if err := writeFigures(svg, chart); err != nil {
			fmt.Fprintf(stderr, "rebound demo: -svg: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nChart (goodput, and attempts per call, over time, without and with the Shedder): %s\n", svg)
	}
	if html != "" {
		r := htmlReport{
			Title: "rebound demo -fleet", Scenario: []string{intro}, Conclusion: concl,
			Tables: []htmlTable{{Caption: "Without and with the Shedder", Rows: table}},
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

// fleetShapeWords says what an outage of shape does.
func fleetShapeWords(s shedload.Shape) string {
	switch s {
	case shedload.FailFast:
		return "a dependency is down and the handler fails every call at once with UNAVAILABLE, no pushback of its own"
	case shedload.CapacityHalved:
		return "half the backend's slots are gone and calls queue for the rest"
	case shedload.Hang:
		return "every call hangs until the outage ends, or its deadline passes"
	}
	return s.String()
}

const fleetDemoLegend = "calls: calls the clients made; amp-outage: attempts per call, over the calls started during the outage; " +
	"shed: calls whose last attempt the Shedder rejected; failed: the other calls that failed; goodput: calls succeeded per second " +
	"in the second before the outage, during it and after it; recovery: the time from the outage's end until the calls starting " +
	"succeed as often as in the second before it (90% of its share, over 250ms of starts), or never."

// fleetDemoRecovery formats a run's recovery, as the table and the
// conclusion print it.
func fleetDemoRecovery(r *shedload.Report) string {
	d, ok := r.Recovery()
	if !ok {
		return "never"
	}
	return d.Round(10 * time.Millisecond).String()
}

// fleetDemoTable returns the two runs as a table, headings first.
func fleetDemoTable(without, with *shedload.Report) [][]string {
	t := [][]string{{"run", "calls", "amp-outage", "shed", "failed", "goodput before", "during", "after", "recovery"}}
	for _, r := range []*shedload.Report{without, with} {
		sc, o := r.Scenario, r.Scenario.Outage
		all := r.Started(0, sc.Duration)
		name := "without the Shedder"
		if sc.Shed != nil {
			name = "with the Shedder"
		}
		t = append(t, []string{name, strconv.Itoa(all.Calls), amp(r.OutageAttempts()),
			share(all.ShedShare()), share(float64(all.Failed) / float64(max(all.Calls, 1))),
			rate(r.Goodput(max(o.Start-time.Second, 0), o.Start)), rate(r.Goodput(o.Start, o.End())), rate(r.Goodput(o.End(), sc.Duration)),
			fleetDemoRecovery(r)})
	}
	return t
}

// fleetDemoConclusion says what the Shedder changed: load in the outage,
// recovery, goodput, with the table's figures.
func fleetDemoConclusion(without, with *shedload.Report) conclusion {
	o := with.Scenario.Outage
	g0, g1 := without.Goodput(o.Start, o.End()), with.Goodput(o.Start, o.End())
	s := with.Stats
	return conclusion{
		Headlines: []string{
			fmt.Sprintf("Load during the outage: %s attempts per call with the Shedder, %s without.", amp(with.OutageAttempts()), amp(without.OutageAttempts())),
			fmt.Sprintf("Recovery: the calls succeeded as often as before %s after the outage with the Shedder (%s without).",
				fleetDemoRecovery(with), fleetDemoRecovery(without)),
			fmt.Sprintf("Goodput during the outage: %s/s with the Shedder, %s/s without.", rate(g1), rate(g0)),
		},
		Detail: []string{fmt.Sprintf("The Shedder admitted %d attempts, shed %d (%d with a delay to retry after, %d with \"don't retry\") "+
			"and gave its pushback to %d failures of the handler; its limit ended at %d.",
			s.Admitted, s.ShedRetry+s.ShedStop, s.ShedRetry, s.ShedStop, s.Refused, s.Limit)},
	}
}

// fleetDemoBin is the width of the chart's bins.
const fleetDemoBin = 100 * time.Millisecond

// fleetDemoSeries returns, per bin of a run, the calls that succeeded per
// second (by when they ended) and the attempts per call (of the calls
// that started in it; NaN for none).
func fleetDemoSeries(r *shedload.Report) (goodput, attempts []svgplot.Point) {
	n := int((r.Scenario.Duration + r.Scenario.Deadline + fleetDemoBin - 1) / fleetDemoBin)
	ok, calls, tries := make([]int, n), make([]int, n), make([]int, n)
	for _, c := range r.Calls {
		if i := int(c.End / fleetDemoBin); c.Outcome == shedload.OK && i < n {
			ok[i]++
		}
		if i := int(c.Start / fleetDemoBin); i < n {
			calls[i]++
			tries[i] += c.Attempts
		}
	}
	for i := range int(r.Scenario.Duration / fleetDemoBin) {
		x := (float64(i) + 0.5) * fleetDemoBin.Seconds()
		a := math.NaN()
		if calls[i] > 0 {
			a = float64(tries[i]) / float64(calls[i])
		}
		goodput = append(goodput, svgplot.Point{X: x, Y: float64(ok[i]) / fleetDemoBin.Seconds()})
		attempts = append(attempts, svgplot.Point{X: x, Y: a})
	}
	return goodput, attempts
}

// fleetDemoChart draws the two runs side by side: the goodput over time
// above, the attempts per call below; the run with the Shedder over the
// one without, in grey; the outage shaded.
func fleetDemoChart(without, with *shedload.Report) *svgplot.Grid {
	o := with.Scenario.Outage
	g0, a0 := fleetDemoSeries(without)
	g1, a1 := fleetDemoSeries(with)
	band := []svgplot.Band{{From: o.Start.Seconds(), To: o.End().Seconds(), Label: "outage"}}
	panel := func(title, ylabel string, mine, other []svgplot.Point) *svgplot.Chart {
		ch := &svgplot.Chart{Title: title, XLabel: "time (s)", YLabel: ylabel, Width: 480, Height: 300, Bands: band}
		if other != nil {
			ch.Series = append(ch.Series, svgplot.Series{Points: other, Color: baseColor})
		}
		ch.Series = append(ch.Series, svgplot.Series{Points: mine, Color: policyColor})
		return ch
	}
	charts := []*svgplot.Chart{
		panel("Without the Shedder: goodput", "calls succeeded/s", g0, nil),
		panel("With the Shedder: goodput", "calls succeeded/s", g1, g0),
		panel("Without the Shedder: attempts per call", "attempts per call started", a0, nil),
		panel("With the Shedder: attempts per call", "attempts per call started", a1, a0),
	}
	top := func(chs ...*svgplot.Chart) {
		m := 0.0
		for _, ch := range chs {
			for _, s := range ch.Series {
				for _, p := range s.Points {
					if !math.IsNaN(p.Y) {
						m = max(m, p.Y)
					}
				}
			}
		}
		for _, ch := range chs {
			ch.YMax = m
		}
	}
	top(charts[0], charts[1])
	top(charts[2], charts[3])
	for _, ch := range charts[2:] {
		ch.Marks = []svgplot.Mark{{Horizontal: true, Value: 1, Label: "1x"}}
	}
	sc := with.Scenario
	return &svgplot.Grid{
		Title: fmt.Sprintf("%d client processes (%v, %d attempts) through an outage (%v) on loopback, without and with shed.Shedder",
			sc.Fleet, sc.Protocol, sc.Attempts, o.Shape),
		Note:    fmt.Sprintf("Each panel: the run (dark); on the right, over the run without the Shedder (grey); %v bins; the outage shaded.", fleetDemoBin),
		Columns: 2,
		Charts:  charts,
	}
}
