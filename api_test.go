package rebound_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/constant"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// apiFile is the golden file of rebound's exported API: one line per
// exported identifier, field and method with its type, in the format of
// Go's own api/*.txt files. A change to the public surface shows up as a
// change to this file in review.
const apiFile = "api/rebound.txt"

// apidiffFile is the same API as apidiff's export data, the v1 contract
// that .ci/run compares the module with: apidiff names every change, and
// CI fails on any that the file does not record. apidiffTool is the
// version of apidiff that writes and reads it; .ci/run installs that one.
const (
	apidiffFile = "api/rebound.apidiff"
	apidiffTool = "golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4"
)

var updateAPI = flag.Bool("update", false, "rewrite "+apiFile+" and "+apidiffFile+" from the current exported API")

// TestAPI compares the exported API of every public package of the module
// (all but internal/ and cmd/; the bench module is a module of its own)
// with the golden file.
func TestAPI(t *testing.T) {
	got, err := exportedAPI()
	if err != nil {
		t.Fatal(err)
	}
	// The only exported variables are error sentinels, for errors.Is: a
	// default or a setting is a constant or a function, so that no package
	// can change it for every other.
	for _, line := range strings.Split(string(got), "\n") {
		if _, decl, ok := strings.Cut(line, ", var "); ok && !strings.HasSuffix(decl, " error") {
			t.Errorf("%s: an exported variable that is not an error sentinel; make it a constant or a function", line)
		}
	}
	if *updateAPI {
		if err := os.WriteFile(apiFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", "run", apidiffTool, "-m", "-w", apidiffFile, "github.com/rebound-go/rebound")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("writing %s: %v\n%s", apidiffFile, err, out)
		}
		return
	}
	want, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatalf("%v\nCreate it with: go test -run TestAPI -update .", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	added, removed := lineDiff(want, got)
	var msg strings.Builder
	fmt.Fprintf(&msg, "the exported API differs from %s.\n", apiFile)
	for _, l := range removed {
		fmt.Fprintf(&msg, "- %s\n", l)
	}
	for _, l := range added {
		fmt.Fprintf(&msg, "+ %s\n", l)
	}
	msg.WriteString("If the change is intended, regenerate the files and commit them with the change:\n" +
		"\tgo test -run TestAPI -update .")
	t.Error(msg.String())
}

// lineDiff returns the lines only in b (added) and only in a (removed);
// both inputs are sorted line sets.
func lineDiff(a, b []byte) (added, removed []string) {
	as := strings.Split(strings.TrimSpace(string(a)), "\n")
	bs := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range bs {
		if !slices.Contains(as, l) {
			added = append(added, l)
		}
	}
	for _, l := range as {
		if !slices.Contains(bs, l) {
			removed = append(removed, l)
		}
	}
	return added, removed
}

// exportedAPI lists the module's public packages with the go command,
// imports each from its compiled export data (so every type is exactly what
// the compiler saw) and describes its exported identifiers, sorted. Only
// the public packages and their dependencies are compiled: not cmd/rebound
// and what it alone imports (the simulation, the plots, OpenTelemetry's
// SDK), which go test -race ./... does not otherwise build without -race.
func exportedAPI() ([]byte, error) {
	cmd := exec.Command("go", "list", "./...")
	cmd.Stderr = new(bytes.Buffer)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, cmd.Stderr)
	}
	args := []string{"list", "-export", "-deps", "-json=ImportPath,Export,Module,Standard"}
	for _, path := range strings.Fields(string(out)) {
		if rel := strings.TrimPrefix(path, "github.com/rebound-go/rebound"); !strings.Contains(rel+"/", "/internal/") && !strings.HasPrefix(rel, "/cmd/") {
			args = append(args, path)
		}
	}
	cmd = exec.Command("go", args...)
	cmd.Stderr = new(bytes.Buffer)
	out, err = cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v\n%s", err, cmd.Stderr)
	}
	type listed struct {
		ImportPath string
		Export     string
		Standard   bool
		Module     *struct{ Path string }
	}
	exports := map[string]string{}
	var public []string
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		exports[p.ImportPath] = p.Export
		if p.Standard || p.Module == nil || p.Module.Path != "github.com/rebound-go/rebound" {
			continue
		}
		rel := strings.TrimPrefix(p.ImportPath, p.Module.Path)
		if strings.Contains(rel+"/", "/internal/") || strings.HasPrefix(rel, "/cmd/") {
			continue
		}
		public = append(public, p.ImportPath)
	}

	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var lines []string
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, err
		}
		lines = append(lines, describePackage(pkg)...)
	}
	slices.Sort(lines)
	return []byte(strings.Join(lines, "\n") + "\n"), nil
}

// describePackage returns one line per exported identifier of pkg, per
// exported field and method of its exported types, and per method of its
// exported interfaces, each prefixed "pkg NAME, " as in Go's api files.
// Types of other packages are qualified by package name; pkg's own are not.
func describePackage(pkg *types.Package) []string {
	prefix := "pkg " + strings.TrimPrefix(pkg.Path(), "github.com/rebound-go/") + ", "
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
	typ := func(t types.Type) string { return types.TypeString(t, qual) }
	sig := func(s *types.Signature) string {
		return strings.TrimPrefix(types.TypeString(s, qual), "func")
	}
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, prefix+fmt.Sprintf(format, args...)) }

	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			val := obj.Val().ExactString()
			if obj.Val().Kind() == constant.String {
				val = obj.Val().String()
			}
			add("const %s %s = %s", name, typ(obj.Type()), val)
		case *types.Var:
			add("var %s %s", name, typ(obj.Type()))
		case *types.Func:
			add("func %s%s", name, sig(obj.Type().(*types.Signature)))
		case *types.TypeName:
			lines = append(lines, describeType(prefix, obj, typ, sig)...)
		}
	}
	return lines
}

// describeType describes an exported type: its kind (or, for an alias, what
// it names), its exported struct fields, its interface methods and the
// methods declared on it.
func describeType(prefix string, obj *types.TypeName, typ func(types.Type) string, sig func(*types.Signature) string) []string {
	name := obj.Name()
	if obj.IsAlias() {
		return []string{prefix + "type " + name + " = " + typ(obj.Type())}
	}
	named := obj.Type().(*types.Named)
	if tp := named.TypeParams(); tp.Len() > 0 {
		var ps []string
		for i := range tp.Len() {
			ps = append(ps, tp.At(i).Obj().Name()+" "+typ(tp.At(i).Constraint()))
		}
		name += "[" + strings.Join(ps, ", ") + "]"
	}
	head := prefix + "type " + name + " "
	var lines []string
	switch u := named.Underlying().(type) {
	case *types.Struct:
		lines = append(lines, head+"struct")
		for i := range u.NumFields() {
			f := u.Field(i)
			switch {
			case f.Embedded():
				lines = append(lines, head+"struct, embedded "+typ(f.Type()))
			case f.Exported():
				lines = append(lines, head+"struct, "+f.Name()+" "+typ(f.Type()))
			}
		}
	case *types.Interface:
		var names []string
		unexported := false
		for i := range u.NumMethods() {
			m := u.Method(i)
			if !m.Exported() {
				unexported = true
				continue
			}
			names = append(names, m.Name())
			lines = append(lines, head+"interface, "+m.Name()+sig(m.Type().(*types.Signature)))
		}
		if unexported {
			names = append(names, "unexported methods")
		}
		lines = append(lines, head+"interface { "+strings.Join(names, ", ")+" }")
	default:
		lines = append(lines, head+typ(u))
	}
	for i := range named.NumMethods() {
		m := named.Method(i)
		if !m.Exported() {
			continue
		}
		s := m.Type().(*types.Signature)
		lines = append(lines, fmt.Sprintf("%smethod (%s) %s%s", prefix, typ(s.Recv().Type()), m.Name(), sig(s)))
	}
	return lines
}

// TestDependencies keeps README's promise that a package brings in only
// what it needs: the engine (package rebound) imports the standard library
// alone, and httpretry neither grpc-go nor connect-go (nor protobuf, which
// the replay log of streams, internal/msglog, needs). That each connect
// front door imports one major of connect-go is TestEachMajorAlone.
func TestDependencies(t *testing.T) {
	for _, tc := range []struct {
		pkg       string
		forbidden func(dep string, std bool) bool
		what      string
	}{
		{".", func(dep string, std bool) bool {
			return !std && !strings.HasPrefix(dep, "github.com/rebound-go/rebound")
		}, "anything but the standard library"},
		{"./httpretry", func(dep string, _ bool) bool {
			return strings.HasPrefix(dep, "google.golang.org/grpc") || strings.HasPrefix(dep, "connectrpc.com/") ||
				strings.HasPrefix(dep, "google.golang.org/protobuf")
		}, "grpc-go, connect-go or protobuf"},
	} {
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", tc.pkg)
		cmd.Stderr = new(bytes.Buffer)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, cmd.Stderr)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			dep, std, _ := strings.Cut(line, " ")
			if tc.forbidden(dep, std == "true") {
				t.Errorf("%s imports %s: it must not import %s", tc.pkg, dep, tc.what)
			}
		}
	}
}

// TestEachMajorAlone: a program that uses one connect-go major compiles
// nothing of the other (issue 33): connectretry's engine and package shed
// import neither, each client and server front door only its own. go
// list -deps gives what a program that imports the package compiles.
func TestEachMajorAlone(t *testing.T) {
	const (
		v1   = "connectrpc.com/connect"
		v2   = "connectrpc.com/connect/v2"
		root = "github.com/rebound-go/rebound/"
	)
	for _, tc := range []struct {
		pkg       string
		want, not []string
	}{
		{root + "connectretry/internal/engine", nil, []string{v1, v2}},
		{root + "connectretry", []string{v1}, []string{v2}},
		{root + "connectretry/v2", []string{v2}, []string{v1, root + "connectretry"}},
		{root + "shed", nil, []string{v1, v2}},
		{root + "shed/connectshed", []string{v1}, []string{v2}},
		{root + "shed/connectshed/v2", []string{v2}, []string{v1, root + "shed/connectshed"}},
	} {
		out, err := exec.Command("go", "list", "-deps", tc.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", tc.pkg, err)
		}
		deps := strings.Fields(string(out))
		for _, p := range tc.want {
			if !slices.Contains(deps, p) {
				t.Errorf("%s does not compile %s; the check is broken", tc.pkg, p)
			}
		}
		for _, p := range tc.not {
			if slices.Contains(deps, p) {
				t.Errorf("a program that imports %s compiles %s", tc.pkg, p)
			}
		}
	}
}
