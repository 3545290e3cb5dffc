package rebound_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/serviceconfig"
)

// TestREADMECode keeps the code in the module's README files true: every
// ```go block is an excerpt of an Example function of the module, which
// go test compiles and runs against its // Output; every ```json block is
// a service config that serviceconfig.Parse accepts; every line of a
// ```dns block is a zone-file TXT record publishing service configs as
// grpc-go's dns resolver reads them; ```sh blocks are commands. Lines are compared without their indentation, and blank lines
// are skipped, so a README may show a few lines of an Example at any depth.
func TestREADMECode(t *testing.T) {
	readmes, examples := moduleFiles(t)
	if len(readmes) == 0 {
		t.Fatal("no README.md found")
	}
	for _, path := range readmes {
		for _, b := range codeBlocks(t, path) {
			where := fmt.Sprintf("%s:%d", path, b.line)
			switch b.lang {
			case "go":
				if !excerptOfAny(b.lines, examples) {
					line, text := firstUnmatched(b.lines, examples)
					t.Errorf("%s: this go block is not an excerpt of an Example function: its line %d, %q, "+
						"continues no Example that has the lines before it. Copy the block from an Example "+
						"(or change the Example, so that go test runs what the README shows).", where, line+1, text)
				}
			case "json":
				if _, err := serviceconfig.Parse([]byte(strings.Join(b.lines, "\n"))); err != nil {
					t.Errorf("%s: this json block is not a valid service config:\n%v", where, err)
				}
			case "dns":
				for _, rec := range b.lines {
					if err := checkTXTConfig(rec); err != nil {
						t.Errorf("%s: %v", where, err)
					}
				}
			case "sh":
			default:
				t.Errorf("%s: a code block needs a language: go (an excerpt of an Example), json (a service config), dns (a TXT record publishing one) or sh", where)
			}
		}
	}
}

// moduleFiles returns the README.md files of the module (not of nested
// modules such as bench) and the normalized body lines of every Example
// function in the module's test files.
func moduleFiles(t *testing.T) (readmes []string, examples [][]string) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || fileExists(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.Name() == "README.md":
			readmes = append(readmes, path)
		case strings.HasSuffix(path, "_test.go"):
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
					continue
				}
				body := src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset]
				examples = append(examples, normalize(string(body)))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return readmes, examples
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// normalize returns the lines of s without indentation, blank ones left
// out.
func normalize(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

type codeBlock struct {
	lang  string
	line  int      // of the opening fence
	lines []string // normalized
}

// codeBlocks returns the fenced code blocks of a Markdown file.
func codeBlocks(t *testing.T, path string) []codeBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []codeBlock
	var cur *codeBlock
	var body strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		switch {
		case cur == nil && fence:
			cur = &codeBlock{lang: strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "```")), line: n}
			body.Reset()
		case cur != nil && fence:
			cur.lines = normalize(body.String())
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line + "\n")
		}
	}
	if cur != nil {
		t.Errorf("%s:%d: code block not closed", path, cur.line)
	}
	return blocks
}

// excerptOfAny reports whether lines occur, in a row, in one of examples.
func excerptOfAny(lines []string, examples [][]string) bool {
	for _, ex := range examples {
		for i := 0; i+len(lines) <= len(ex); i++ {
			if equalLines(ex[i:i+len(lines)], lines) {
				return true
			}
		}
	}
	return false
}

// firstUnmatched returns the index and text of the first line of lines
// that no Example continues: the longest prefix of lines found in a row in
// an Example ends just before it.
func firstUnmatched(lines []string, examples [][]string) (int, string) {
	best := 0
	for _, ex := range examples {
		for i := range ex {
			n := 0
			for n < len(lines) && i+n < len(ex) && ex[i+n] == lines[n] {
				n++
			}
			best = max(best, n)
		}
	}
	if best >= len(lines) {
		return len(lines) - 1, lines[len(lines)-1]
	}
	return best, lines[best]
}

func equalLines(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkTXTConfig checks a zone-file TXT record of _grpc_config.<host> as
// grpc-go's dns resolver reads it (gRFC A2): strings of at most 255 bytes,
// joined, holding "grpc_config=" and a JSON list of choices whose
// serviceConfig serviceconfig.Parse accepts.
func checkTXTConfig(rec string) error {
	name, rest, _ := strings.Cut(rec, " ")
	if !strings.HasPrefix(name, "_grpc_config.") {
		return fmt.Errorf("the record's name is %q, not _grpc_config.<host>", name)
	}
	_, rest, ok := strings.Cut(rest, " TXT ")
	if !ok {
		return fmt.Errorf("%q is not a TXT record", rec)
	}
	var txt strings.Builder
	rest = strings.TrimSpace(rest)
	for rest != "" {
		if rest[0] != '"' {
			return fmt.Errorf("TXT data %q is not a quoted string", rest)
		}
		var s []byte
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++ // zone files escape a quote or a backslash so
			}
			s = append(s, rest[i])
		}
		if i == len(rest) {
			return fmt.Errorf("TXT string not closed: %q", rest)
		}
		if len(s) > 255 {
			return fmt.Errorf("a TXT string holds at most 255 bytes, this one %d: split it", len(s))
		}
		txt.Write(s)
		rest = strings.TrimSpace(rest[i+1:])
	}
	js, ok := strings.CutPrefix(txt.String(), "grpc_config=")
	if !ok {
		return fmt.Errorf("the TXT data %q does not start with grpc_config=", txt.String())
	}
	var choices []struct {
		ServiceConfig json.RawMessage `json:"serviceConfig"`
	}
	if err := json.Unmarshal([]byte(js), &choices); err != nil || len(choices) == 0 {
		return fmt.Errorf("grpc_config is not a JSON list of choices: %v", err)
	}
	for i, c := range choices {
		if _, err := serviceconfig.Parse(c.ServiceConfig); err != nil {
			return fmt.Errorf("choice %d: the serviceConfig is not valid:\n%v", i, err)
		}
	}
	return nil
}
