package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rebound-go/rebound/serviceconfig"
)

// Exit codes of validate, as its usage text documents them.
const (
	exitValid   = 0
	exitInvalid = 1
	exitUsage   = 2
)

var validateHelp = help{
	name:  "validate",
	usage: "rebound validate [flags] FILE...",
	about: `Checks gRPC service config files against gRFC A6 and prints the effective
policy of each method. FILE "-" reads standard input. Flags may come before
or after the files; every argument after "--" is a file.

Each problem is one line, as editors and CI annotators read them:

  FILE:LINE:COL: JSON.PATH: message                 (an error)
  FILE:LINE:COL: warning: JSON.PATH: message        (a warning)

Every problem of a file is reported in one run: its errors, its warnings
(an unknown field; one that is near a known field, such as
"retryThrotling", is an error, as the setting it meant is silently off) and
AIP-194's advice on the status codes it retries, whether or not the file is
valid. Configs that grpc-go accepts in other spellings (field names in
another letter case, durations like ".5s") are valid with a warning naming
A6's spelling, as is a file that starts with a UTF-8 byte order mark, which
grpc-go rejects; -strict makes every warning an error.

Exit status:
  0  every file is valid (with -strict: and has no warnings)
  1  a file is invalid or cannot be read
  2  usage error`,
}

// runValidateStdin is the validate command, reading "-" from os.Stdin.
func runValidateStdin(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runValidate(ctx, args, os.Stdin, stdout, stderr)
}

func runValidate(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := validateHelp.newFlagSet()
	clientMax := fs.Int("max-attempts", serviceconfig.DefaultMaxAttemptsCap, "client-side maximum of attempts that maxAttempts is clamped to")
	strict := fs.Bool("strict", false, "treat warnings as errors")
	format := fs.String("format", "text", "output format: text, or json for one JSON document of findings and policies")
	version := fs.Bool("version", false, "print the module version and exit, as 'rebound version'")
	maxBytes := fs.Int("max-bytes", serviceconfig.DefaultMaxBytes, "largest config read, in bytes")
	files, code, ok := parseInterleaved(validateHelp, fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if *version {
		fmt.Fprintln(stdout, "rebound", moduleVersion())
		return exitValid
	}
	switch {
	case len(files) == 0:
		return validateHelp.fail(stderr, "no FILE given")
	case *clientMax < 1:
		return validateHelp.fail(stderr, "-max-attempts must be >= 1, got %d", *clientMax)
	case *maxBytes < 1:
		return validateHelp.fail(stderr, "-max-bytes must be >= 1, got %d", *maxBytes)
	case *format != "text" && *format != "json":
		return validateHelp.fail(stderr, "-format must be text or json, got %q", *format)
	}
	stdinUsed := false
	var reports []fileReport
	for _, name := range files {
		var data []byte
		var err error
		if name == "-" {
			if stdinUsed {
				return validateHelp.fail(stderr, `"-" (standard input) given twice`)
			}
			stdinUsed = true
			data, err = readLimited(stdin, *maxBytes)
		} else {
			data, err = readFile(name, *maxBytes)
		}
		reports = append(reports, check(name, data, err, *clientMax, *maxBytes, *strict))
	}
	code = exitValid
	for _, r := range reports {
		if !r.Valid {
			code = exitInvalid
		}
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reports); err != nil {
			fmt.Fprintln(stderr, "rebound validate:", err)
			return exitInvalid
		}
		return code
	}
	for _, r := range reports {
		r.print(stdout)
	}
	return code
}

// parseInterleaved parses args into fs with flags before, between or after
// the other arguments, as most command-line tools allow, and returns the
// others in order; every argument after "--" is one of them. ok is false
// when the command should return code (help was printed, or a flag was
// bad).
func parseInterleaved(h help, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (rest []string, code int, ok bool) {
	for {
		if code, ok := h.parse(fs, args, stdout, stderr); !ok {
			return nil, code, false
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, 0, true
		}
		// The flag package stops at the first non-flag argument, or
		// after "--", which it consumes.
		if used := len(args) - len(left); used > 0 && args[used-1] == "--" {
			return append(rest, left...), 0, true
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// fileReport is the verdict on one file, as text or as JSON.
type fileReport struct {
	File            string          `json:"file"`
	Valid           bool            `json:"valid"`
	Findings        []finding       `json:"findings"`
	RetryThrottling *throttleReport `json:"retryThrottling,omitempty"`
	Methods         []methodReport  `json:"methods,omitempty"`
}

// finding is one error or warning.
type finding struct {
	Severity string `json:"severity"` // "error" or "warning"
	Path     string `json:"path"`     // JSON path, or "" for the whole document
	Line     int    `json:"line"`     // 0 when there is no place, as for a file that cannot be read
	Col      int    `json:"col"`
	Message  string `json:"message"`
}

type throttleReport struct {
	MaxTokens  int     `json:"maxTokens"`
	TokenRatio float64 `json:"tokenRatio"`
	Threshold  float64 `json:"threshold"`
}

// methodReport is the effective policy of one methodConfig entry: every
// setting it makes, with attempts clamped to the client's maximum.
type methodReport struct {
	Names                   []string       `json:"names"`
	Timeout                 string         `json:"timeout,omitempty"`
	WaitForReady            *bool          `json:"waitForReady,omitempty"`
	MaxRequestMessageBytes  *int64         `json:"maxRequestMessageBytes,omitempty"`
	MaxResponseMessageBytes *int64         `json:"maxResponseMessageBytes,omitempty"`
	Retry                   *retryReport   `json:"retryPolicy,omitempty"`
	Hedging                 *hedgingReport `json:"hedgingPolicy,omitempty"`
}

type retryReport struct {
	Attempts              int      `json:"attempts"`
	ConfiguredAttempts    int      `json:"configuredAttempts"`
	RetryableStatusCodes  []string `json:"retryableStatusCodes"`
	PerAttemptRecvTimeout string   `json:"perAttemptRecvTimeout,omitempty"`
	// BackoffCeilings are the upper bounds of the random wait before each
	// retry, in order.
	BackoffCeilings []string `json:"backoffCeilings"`
}

type hedgingReport struct {
	Attempts            int      `json:"attempts"`
	ConfiguredAttempts  int      `json:"configuredAttempts"`
	HedgingDelay        string   `json:"hedgingDelay"`
	NonFatalStatusCodes []string `json:"nonFatalStatusCodes"`
}

// check parses one file's data (or reports readErr) into a fileReport.
func check(name string, data []byte, readErr error, clientMax, maxBytes int, strict bool) fileReport {
	r := fileReport{File: name, Findings: []finding{}}
	if readErr != nil {
		r.Findings = append(r.Findings, finding{Severity: "error", Message: readErr.Error()})
		return r
	}
	// Every finding in one run: AIP-194's advice too, whether or not the
	// config is valid.
	cfg, err := serviceconfig.Parse(data, serviceconfig.MaxBytes(maxBytes), serviceconfig.IncludeLint())
	var warns []serviceconfig.Warning
	var pe *serviceconfig.ParseError
	switch {
	case err == nil:
		warns = cfg.Warnings
	case errors.As(err, &pe):
		warns = pe.Warnings
	default:
		r.Findings = append(r.Findings, finding{Severity: "error", Message: err.Error()})
		return r
	}
	// Errors and warnings side by side, in document order.
	var errs []*serviceconfig.Error
	if pe != nil {
		errs = pe.Errors
	}
	warnSeverity := "warning"
	if strict {
		warnSeverity = "error"
	}
	i, j, typos := 0, 0, 0
	for i < len(errs) || j < len(warns) {
		if j == len(warns) || (i < len(errs) && !before(warns[j].Line, warns[j].Column, errs[i].Line, errs[i].Column)) {
			e := errs[i]
			// A syntax error says where it is in its message too, for
			// callers of Parse that print only that; the finding has it.
			msg := strings.TrimSuffix(e.Message, fmt.Sprintf(" (line %d, column %d)", e.Line, e.Column))
			r.Findings = append(r.Findings, finding{"error", e.Path, e.Line, e.Column, msg})
			i++
		} else {
			w := warns[j]
			sev := warnSeverity
			if w.Suggestion != "" {
				// A near miss of a known field is almost always a typo
				// that silently turns a setting off: a check must fail.
				sev = "error"
				typos++
			}
			r.Findings = append(r.Findings, finding{sev, w.Path, w.Line, w.Column, w.Message})
			j++
		}
	}
	r.Valid = err == nil && typos == 0 && (!strict || len(warns) == 0)
	if err == nil {
		r.describe(cfg, clientMax)
	}
	return r
}

// before reports whether position (l1, c1) comes before (l2, c2); a
// position without a line (a summary such as "and 5 more") comes last.
func before(l1, c1, l2, c2 int) bool {
	switch {
	case l1 == 0:
		return false
	case l2 == 0:
		return true
	}
	return l1 < l2 || (l1 == l2 && c1 < c2)
}

func readFile(name string, maxBytes int) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, maxBytes)
}

// readLimited reads all of r, but stops with an error after maxBytes.
func readLimited(r io.Reader, maxBytes int) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, int64(maxBytes)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxBytes {
		return nil, fmt.Errorf("larger than %d bytes (see -max-bytes)", maxBytes)
	}
	return data, nil
}

// describe records the effective policy of every method config.
func (r *fileReport) describe(cfg *serviceconfig.Config, clientMax int) {
	if t := cfg.RetryThrottling; t != nil {
		r.RetryThrottling = &throttleReport{t.MaxTokens, t.TokenRatio, t.Threshold()}
	}
	for i := range cfg.MethodConfigs {
		mc := &cfg.MethodConfigs[i]
		m := methodReport{
			Names:                   []string{},
			WaitForReady:            mc.WaitForReady,
			MaxRequestMessageBytes:  mc.MaxRequestMessageBytes,
			MaxResponseMessageBytes: mc.MaxResponseMessageBytes,
		}
		for _, n := range mc.Names {
			m.Names = append(m.Names, displayName(n))
		}
		if mc.Timeout > 0 {
			m.Timeout = serviceconfig.FormatDuration(mc.Timeout)
		}
		if p := mc.RetryPolicy; p != nil {
			n := p.Attempts(clientMax)
			rr := &retryReport{Attempts: n, ConfiguredAttempts: p.MaxAttempts, RetryableStatusCodes: codeNames(p.RetryableStatusCodes), BackoffCeilings: []string{}}
			if p.PerAttemptRecvTimeout > 0 {
				rr.PerAttemptRecvTimeout = serviceconfig.FormatDuration(p.PerAttemptRecvTimeout)
			}
			for retry := 1; retry < n; retry++ {
				rr.BackoffCeilings = append(rr.BackoffCeilings, serviceconfig.FormatDuration(p.BackoffCeiling(retry)))
			}
			m.Retry = rr
		}
		if p := mc.HedgingPolicy; p != nil {
			m.Hedging = &hedgingReport{p.Attempts(clientMax), p.MaxAttempts, serviceconfig.FormatDuration(p.HedgingDelay), codeNames(p.NonFatalStatusCodes)}
		}
		r.Methods = append(r.Methods, m)
	}
}

func codeNames(s serviceconfig.CodeSet) []string {
	out := []string{}
	for _, c := range s.Codes() {
		out = append(out, c.String())
	}
	return out
}

// print writes r as text: one line per finding, then the verdict and the
// effective policies.
func (r *fileReport) print(w io.Writer) {
	errs, warns := 0, 0
	for _, f := range r.Findings {
		var b strings.Builder
		b.WriteString(r.File)
		if f.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", f.Line, f.Col)
		}
		b.WriteString(": ")
		if f.Severity == "warning" {
			warns++
			b.WriteString("warning: ")
		} else {
			errs++
		}
		if f.Path != "" {
			b.WriteString(f.Path + ": ")
		}
		b.WriteString(f.Message)
		fmt.Fprintln(w, b.String())
	}
	if !r.Valid {
		fmt.Fprintf(w, "%s: invalid (%s, %s)\n", r.File, plural(errs, "error"), plural(warns, "warning"))
		return
	}
	fmt.Fprintf(w, "%s: valid\n", r.File)
	if t := r.RetryThrottling; t != nil {
		fmt.Fprintf(w, "  retryThrottling: maxTokens %d, +%g per success, retries and hedges stop at or below %g tokens\n",
			t.MaxTokens, t.TokenRatio, t.Threshold)
	}
	for _, m := range r.Methods {
		fmt.Fprintf(w, "  %s\n", strings.Join(m.Names, ", ")) // Parse keeps only entries that name a method
		if m.Timeout != "" {
			fmt.Fprintf(w, "    timeout %s\n", human(m.Timeout))
		}
		if m.WaitForReady != nil {
			fmt.Fprintf(w, "    waitForReady %t\n", *m.WaitForReady)
		}
		if m.MaxRequestMessageBytes != nil {
			fmt.Fprintf(w, "    maxRequestMessageBytes %d\n", *m.MaxRequestMessageBytes)
		}
		if m.MaxResponseMessageBytes != nil {
			fmt.Fprintf(w, "    maxResponseMessageBytes %d\n", *m.MaxResponseMessageBytes)
		}
		switch {
		case m.Retry != nil:
			p := m.Retry
			on := "on [" + strings.Join(p.RetryableStatusCodes, " ") + "]"
			switch {
			case p.PerAttemptRecvTimeout != "" && len(p.RetryableStatusCodes) == 0:
				on = "on per-attempt timeouts only"
			case p.PerAttemptRecvTimeout != "":
				on += " and per-attempt timeouts"
			}
			fmt.Fprintf(w, "    retry: %d attempts%s %s\n", p.Attempts, clamped(p.ConfiguredAttempts, p.Attempts), on)
			if p.PerAttemptRecvTimeout != "" {
				fmt.Fprintf(w, "      perAttemptRecvTimeout %s: an attempt with no response headers, message or status by then is cancelled\n", human(p.PerAttemptRecvTimeout))
			}
			for i, c := range p.BackoffCeilings {
				fmt.Fprintf(w, "      retry %d after random(0, %s)\n", i+1, human(c))
			}
		case m.Hedging != nil:
			p := m.Hedging
			fmt.Fprintf(w, "    hedging: %d attempts%s, one every %s, non-fatal [%s]\n",
				p.Attempts, clamped(p.ConfiguredAttempts, p.Attempts), human(p.HedgingDelay), strings.Join(p.NonFatalStatusCodes, " "))
		default:
			fmt.Fprintln(w, "    no retries")
		}
	}
}

// human returns a duration of a report, written as in a config, the way Go
// prints a time.Duration: "0.100s" as "100ms".
func human(s string) string {
	if d, err := serviceconfig.ParseDuration(s); err == nil {
		return d.String()
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
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
