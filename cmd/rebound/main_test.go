package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "-error-rate", "1.5"},
		{"demo", "-rate", "0"},
		{"demo", "-duration", "1ms"},
		{"demo", "-outage", "10s"},
		{"demo", "-timeout", "-1s"},
		{"demo", "extra"},
		{"demo", "-nope"},
	} {
		if _, _, code := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	out, stderr, code := runCLI(t, "frobnicate")
	if code != 2 || out != "" || !strings.Contains(stderr, `unknown command "frobnicate"`) || !strings.Contains(stderr, "demo") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if out, stderr, code := runCLI(t); code != 2 || out != "" || !strings.Contains(stderr, "usage: rebound <command> [flags]") {
		t.Fatalf("no command: exit %d, stdout %q, stderr %q; want 2 and the usage on stderr", code, out, stderr)
	}
}

// Every command's help has one form: asked for with -h, -help, --help or
// 'rebound help <command>', it goes to stdout with exit 0, and reads
// "usage: rebound <command> ...", what the command does, then its flags
// under "Flags:".
func TestHelp(t *testing.T) {
	for _, name := range []string{"demo", "sim", "validate", "version"} {
		var first string
		for _, args := range [][]string{{name, "-h"}, {name, "-help"}, {name, "--help"}, {"help", name}} {
			out, stderr, code := runCLI(t, args...)
			if code != 0 || stderr != "" {
				t.Errorf("%q: exit %d, stderr %q; want 0 and nothing on stderr", args, code, stderr)
				continue
			}
			if !strings.HasPrefix(out, "usage: rebound "+name) {
				t.Errorf("%q: help starts %.40q, want \"usage: rebound %s\"", args, out, name)
			}
			if hasFlags := name != "version"; strings.Contains(out, "\nFlags:\n  -") != hasFlags {
				t.Errorf("%q: help with flags %v, want %v under \"Flags:\":\n%s", args, !hasFlags, hasFlags, out)
			}
			if strings.Contains(out, "flags:\n") || strings.Contains(out, "commands:\n") {
				t.Errorf("%q: a heading in lower case:\n%s", args, out)
			}
			if first == "" {
				first = out
			} else if out != first {
				t.Errorf("%q: help differs from %q's", args, []string{name, "-h"})
			}
		}
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "help"}} {
		out, stderr, code := runCLI(t, args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(out, "usage: rebound <command> [flags]\n\nCommands:\n") {
			t.Errorf("%q: exit %d, stderr %q, stdout %q", args, code, stderr, out)
		}
		for _, name := range []string{"demo", "help", "sim", "validate", "version"} {
			if !strings.Contains(out, "\n  "+name+" ") {
				t.Errorf("%q: command list lacks %s:\n%s", args, name, out)
			}
		}
	}
	for _, args := range [][]string{{"help", "nope"}, {"help", "demo", "sim"}} {
		if out, stderr, code := runCLI(t, args...); code != 2 || out != "" || stderr == "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and an error on stderr", args, code, out, stderr)
		}
	}
}

// A usage error names what is wrong and where the help is, on stderr, with
// exit 2 and nothing on stdout, in every command.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "-nope"}, {"sim", "-nope"}, {"validate", "-nope", "x.json"}, {"version", "-nope"},
		{"demo", "extra"}, {"sim", "extra"}, {"version", "extra"}, {"validate"},
	} {
		out, stderr, code := runCLI(t, args...)
		want := regexp.MustCompile(`^rebound ` + args[0] + `: .+\nusage: rebound ` + args[0] + `.*\nRun 'rebound help ` + args[0] + `' for details\.\n$`)
		if code != 2 || out != "" || !want.MatchString(stderr) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and\n%v", args, code, out, stderr, want)
		}
	}
}

// rebound version, -version and --version print the module version, as
// validate -version always has.
func TestVersion(t *testing.T) {
	version := regexp.MustCompile(`^rebound (\(devel\)|v\S+)( [0-9a-f]+)? go1\.\S+\n$`)
	var first string
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}, {"validate", "-version"}, {"validate", "--version"}} {
		out, stderr, code := runCLI(t, args...)
		// A test binary is built inside the module: its version is
		// "(devel)", followed by the Go version.
		if code != 0 || stderr != "" || !version.MatchString(out) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
		if first == "" {
			first = out
		} else if out != first {
			t.Errorf("%q: %q, want %q as the others", args, out, first)
		}
	}
}
