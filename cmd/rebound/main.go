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
//	help      print the help of rebound or of a command
//	sim       simulate clients retrying through an outage; compare load and goodput per policy
//	validate  check gRPC service config files (gRFC A6) and show each method's policy
//	version   print the version of rebound
//
// Every command prints its help, flags included, with -h or
// 'rebound help <command>', on standard output. A usage error is reported
// on standard error with exit status 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
)

// command is one subcommand: run gets the arguments after its name and
// returns the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands are the subcommands; help is handled by run, before them.
var commands = map[string]command{
	"demo":     {"run retry policies against an in-process flaky service", runDemo},
	"sim":      {"simulate clients retrying through an outage; compare load and goodput per policy", runSim},
	"validate": {"check gRPC service config files (gRFC A6) and show each method's policy", runValidateStdin},
	"version":  {"print the version of rebound", runVersion},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		return runVersion(ctx, args[1:], stdout, stderr)
	case "help":
		return runHelp(ctx, args[1:], stdout, stderr)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rebound: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

// runHelp is 'rebound help [command]': rebound's usage, or the command's
// help, which is what the command prints for -h.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stdout)
		return 0
	case len(args) > 1:
		fmt.Fprintln(stderr, "rebound help: give one command")
		fmt.Fprintln(stderr, "usage: rebound help [command]")
		return 2
	case args[0] == "help":
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rebound help: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(ctx, []string{"-h"}, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprint(w, "usage: rebound <command> [flags]\n\nCommands:\n")
	all := map[string]string{"help": "print the help of rebound or of a command"}
	for name, c := range commands {
		all[name] = c.summary
	}
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, all[name])
	}
	fmt.Fprintln(w, "\nRun 'rebound help <command>' for a command's help and flags; 'rebound -version' prints the version.")
}

// help is the help text of one command, and the way every command reports
// a usage error.
type help struct {
	name  string // "demo"
	usage string // the synopsis after "usage: ", such as "rebound demo [flags]"
	// about says what the command does, in paragraphs, before its flags.
	about string
}

// print writes the help to w: the synopsis, what the command does, and the
// flags of fs under "Flags:".
func (h help) print(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", h.usage, strings.TrimSpace(h.about))
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// fail reports a usage error on w, as 'go' does: what is wrong, the
// synopsis and where the help is. It returns exit status 2.
func (h help) fail(w io.Writer, format string, args ...any) int {
	fmt.Fprintf(w, "rebound %s: %s\nusage: %s\nRun 'rebound help %s' for details.\n", h.name, fmt.Sprintf(format, args...), h.usage, h.name)
	return 2
}

// newFlagSet returns a flag set for the command that reports nothing
// itself: parse reports for it.
func (h help) newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet(h.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args into fs. For -h it prints the help on stdout; for a bad
// flag, a usage error on stderr. ok is false when the command should
// return code.
func (h help) parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		h.print(stdout, fs)
		return 0, false
	}
	return h.fail(stderr, "%v", err), false
}

// setFlags returns the names of the flags set on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

var versionHelp = help{
	name:  "version",
	usage: "rebound version",
	about: `Prints the version of the rebound module this binary was built from, as
the Go toolchain recorded it, and the Go version that built it. The same
as 'rebound -version'.`,
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := versionHelp.newFlagSet()
	if code, ok := versionHelp.parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return versionHelp.fail(stderr, "unexpected argument %q", fs.Arg(0))
	}
	fmt.Fprintln(stdout, "rebound", moduleVersion())
	return 0
}

// moduleVersion returns the version of the rebound module this binary was
// built from, as the Go toolchain recorded it: a tag, a pseudo-version, or
// "(devel)" for a build inside the module's own tree, with the commit when
// it is known; then the Go version.
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown version: built without module support)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && v == "(devel)" {
			v += " " + s.Value
		}
	}
	return v + " " + bi.GoVersion
}
