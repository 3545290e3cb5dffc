// Command rebound shows rebound's retry engine at work and checks retry
// configurations.
//
// Usage:
//
//	rebound <command> [flags]
//
// Commands:
//
//	demo      run retry policies against an in-process flaky service
//	sim       simulate clients retrying through an outage; compare load and goodput per policy
//	validate  check gRPC service config files (gRFC A6) and show each method's policy
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
)

// command is one subcommand: run gets the arguments after its name and
// returns the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"demo":     {"run retry policies against an in-process flaky service", runDemo},
	"sim":      {"simulate clients retrying through an outage; compare load and goodput per policy", runSim},
	"validate": {"check gRPC service config files (gRFC A6) and show each method's policy", runValidateStdin},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rebound: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: rebound <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nrun 'rebound <command> -h' for a command's flags")
}
