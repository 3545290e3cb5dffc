package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/internal/fleetdemo"
)

func TestFleetDemo(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "fleet.svg")
	var out, errb bytes.Buffer
	c := fleetdemo.Config{Clients: 60, Rounds: 4, Limit: 8, Seed: 1}
	if code := runFleetDemo(context.Background(), c, svg, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"60 gRPC clients on loopback", "round", "The server accepted at most its limit of 8", "wrote the chart to " + svg} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
		t.Fatalf("chart: %v, %.20q", err, b)
	}
	errb.Reset()
	if code := runFleetDemo(context.Background(), fleetdemo.Config{Clients: 10, Rounds: 1, Limit: 20}, "", &out, &errb); code != 2 || !strings.Contains(errb.String(), "-fleet-limit") {
		t.Errorf("limit above clients: exit %d, %q", code, errb.String())
	}
}

func TestDemoFleetFlag(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"-fleet", "-fleet-clients", "40", "-fleet-rounds", "3", "-fleet-limit", "4", "-svg", ""}
	if code := runDemo(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "40 gRPC clients on loopback") || !strings.Contains(out.String(), "at most its limit of 4") {
		t.Fatalf("output:\n%s", out.String())
	}
}
