package rebound_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocTableNames keeps the root package doc's table of concepts true:
// every Go name in a package's column (DialOptions, Interceptor.Err,
// rebound.TokenBucket, ...) must be in the exported API of that package,
// or of package rebound, as api/rebound.txt lists it. A row whose text runs
// across columns may name anything of the three packages. Rename an API,
// and this test points at the table.
func TestDocTableNames(t *testing.T) {
	api, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := []string{"grpcretry", "connectretry", "httpretry"}
	var header string
	var rows []string
	for _, line := range strings.Split(string(src), "\n") {
		text, ok := strings.CutPrefix(line, "//\t")
		switch {
		case header == "" && ok && strings.Contains(text, "grpcretry") && strings.Contains(text, "httpretry"):
			header = text
		case header != "" && ok:
			rows = append(rows, text)
		}
		if header != "" && !ok {
			break
		}
	}
	if header == "" || len(rows) < 10 {
		t.Fatalf("doc.go has no table of the protocol packages' names (header %q, %d rows)", header, len(rows))
	}
	var starts []int
	for _, p := range pkgs {
		starts = append(starts, strings.Index(header, p))
	}

	checked := 0
	for _, row := range rows {
		cells, cellPkgs := splitRow(row, starts, pkgs)
		for i, cell := range cells {
			for _, name := range goNames(cell) {
				checked++
				if !inAPI(string(api), name, cellPkgs[i]) {
					t.Errorf("doc.go table row %q names %s, which is not in the exported API of %v", strings.TrimSpace(row), name, cellPkgs[i])
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d names in the table", checked)
	}
}

// splitRow cuts a table row at the column starts, and says which packages
// each cell may name. A row with text across a column start is one cell
// that may name any of them.
func splitRow(row string, starts []int, pkgs []string) (cells []string, cellPkgs [][]string) {
	for _, s := range starts {
		if s > 0 && s < len(row) && row[s-1] != ' ' && row[s] != ' ' {
			return []string{row[starts[0]:]}, [][]string{pkgs}
		}
	}
	for i, s := range starts {
		if s >= len(row) {
			break
		}
		end := len(row)
		if i+1 < len(starts) && starts[i+1] < len(row) {
			end = starts[i+1]
		}
		cells = append(cells, row[s:end])
		cellPkgs = append(cellPkgs, []string{pkgs[i]})
	}
	return cells, cellPkgs
}

var dotted = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*`)

// goNames returns the names in a cell that refer to the API of a protocol
// package or of rebound: Name, Type.Method, rebound.Name. Names of other
// packages (grpc.NewClient), lower-case words, all-caps words (GET),
// hyphenated words (Retry-After), quoted text and metric names
// (rebound.client.call.*) are left out.
func goNames(cell string) []string {
	var names []string
	for _, loc := range dotted.FindAllStringIndex(cell, -1) {
		tok := cell[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsRune(`".-/`, rune(cell[loc[0]-1])) {
			continue
		}
		if loc[1] < len(cell) && strings.ContainsRune(`"-`, rune(cell[loc[1]])) || strings.HasPrefix(cell[loc[1]:], ".*") {
			continue
		}
		first, _, _ := strings.Cut(tok, ".")
		switch {
		case first == "rebound":
			names = append(names, tok)
		case !unicode.IsUpper(rune(first[0])) || strings.ToUpper(first) == first:
		default:
			names = append(names, tok)
		}
	}
	return names
}

// inAPI reports whether name (Name, Type.Method, Type.Field or
// rebound.Name) is an exported identifier, method or field of one of pkgs
// or of rebound.
func inAPI(api, name string, pkgs []string) bool {
	if rest, ok := strings.CutPrefix(name, "rebound."); ok {
		return declared(api, "rebound", rest)
	}
	for _, p := range append([]string{"rebound"}, pkgs...) {
		path := p
		if p != "rebound" {
			path = "rebound/" + p
		}
		if declared(api, path, name) {
			return true
		}
	}
	return false
}

// declared reports whether the api file lists name (Name, Type.Method or
// Type.Field) in package path.
func declared(api, path, name string) bool {
	prefix := "pkg " + path + ", "
	typ, method, isMethod := strings.Cut(name, ".")
	for _, line := range strings.Split(api, "\n") {
		decl, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		if isMethod {
			if strings.HasPrefix(decl, "method ("+typ+") "+method+"(") || strings.HasPrefix(decl, "method (*"+typ+") "+method+"(") ||
				strings.HasPrefix(decl, "type "+typ+" struct, "+method+" ") {
				return true
			}
			continue
		}
		for _, kind := range []string{"func ", "type ", "var ", "const "} {
			if strings.HasPrefix(decl, kind+name+"(") || strings.HasPrefix(decl, kind+name+" ") || strings.HasPrefix(decl, kind+name+"[") {
				return true
			}
		}
	}
	return false
}
