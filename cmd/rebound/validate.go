package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rebound-go/rebound/serviceconfig"
)

// maxConfigBytes bounds the size of a config file that validate reads.
const maxConfigBytes = 4 << 20

func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	clientMax := fs.Int("max-attempts", serviceconfig.DefaultMaxAttempts, "client-side maximum of attempts that maxAttempts is clamped to")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rebound validate [-max-attempts N] FILE...")
		fmt.Fprintln(stderr, "\nChecks gRPC service config files against gRFC A6 and prints the effective retry policy of each method.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if *clientMax < 1 {
		fmt.Fprintf(stderr, "validate: -max-attempts must be >= 1, got %d\n", *clientMax)
		return 2
	}
	code := 0
	for _, name := range fs.Args() {
		if !validateFile(stdout, name, *clientMax) {
			code = 1
		}
	}
	return code
}

// validateFile prints the verdict on one file and reports whether it is
// valid.
func validateFile(w io.Writer, name string, clientMax int) bool {
	data, err := readLimited(name)
	if err != nil {
		fmt.Fprintf(w, "%s: error: %v\n", name, err)
		return false
	}
	cfg, err := serviceconfig.Parse(data)
	if err != nil {
		for _, e := range splitErrors(err) {
			fmt.Fprintf(w, "%s: error: %s\n", name, strings.TrimPrefix(e.Error(), "serviceconfig: "))
		}
		return false
	}
	for _, wn := range append(cfg.Warnings, serviceconfig.Lint(cfg)...) {
		fmt.Fprintf(w, "%s: warning: %s\n", name, wn)
	}
	fmt.Fprintf(w, "%s: valid\n", name)
	describe(w, cfg, clientMax)
	return true
}

func readLimited(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxConfigBytes)
	}
	return data, nil
}

func splitErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// describe prints the effective policy of every method config.
func describe(w io.Writer, cfg *serviceconfig.Config, clientMax int) {
	if t := cfg.RetryThrottling; t != nil {
		fmt.Fprintf(w, "  retryThrottling: maxTokens %d, +%g per success, retries and hedges stop at or below %g tokens\n",
			t.MaxTokens, t.TokenRatio, t.Threshold())
	}
	for i := range cfg.MethodConfigs {
		mc := &cfg.MethodConfigs[i]
		names := make([]string, len(mc.Names))
		for j, n := range mc.Names {
			names[j] = displayName(n)
		}
		fmt.Fprintf(w, "  %s\n", strings.Join(names, ", "))
		if mc.Timeout > 0 {
			fmt.Fprintf(w, "    timeout %v\n", mc.Timeout)
		}
		switch {
		case mc.RetryPolicy != nil:
			p := mc.RetryPolicy
			n := p.Attempts(clientMax)
			fmt.Fprintf(w, "    retry: %d attempts%s on %s\n", n, clamped(p.MaxAttempts, n), p.RetryableStatusCodes)
			for r := 1; r < n; r++ {
				fmt.Fprintf(w, "      retry %d after random(0, %v)\n", r, p.BackoffCeiling(r))
			}
		case mc.HedgingPolicy != nil:
			p := mc.HedgingPolicy
			n := p.Attempts(clientMax)
			fmt.Fprintf(w, "    hedging: %d attempts%s, one every %v, non-fatal %s\n", n, clamped(p.MaxAttempts, n), p.HedgingDelay, p.NonFatalStatusCodes)
		default:
			fmt.Fprintln(w, "    no retries")
		}
	}
}

func displayName(n serviceconfig.Name) string {
	switch {
	case n.Service == "":
		return "default (every method)"
	case n.Method == "":
		return "/" + n.Service + "/*"
	}
	return "/" + n.Service + "/" + n.Method
}

func clamped(asked, got int) string {
	if asked == got {
		return ""
	}
	return fmt.Sprintf(" (config asks %d, clamped to the client maximum)", asked)
}
