package core_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
)

// turnFiles are the turn (turn.go), its batch (batch.go), its gate (gate.go) and the object's
// lifecycle (object.go): the only files that call across a seam or touch the gate holder's fields.
var turnFiles = []string{"turn.go", "batch.go", "gate.go", "object.go"}

// Only the turn and the object's lifecycle (turnFiles) call the telemetry hooks, the runtime's
// field tel (seams.go). The runtime makes and closes them (runtime.go), and a namespace takes its
// counts and attributes from them (namespace.go); no other file of package core references them.
func TestSeams_TelemetryHooksCalledOnlyByTheTurnAndTheObject(t *testing.T) {
	allowed := map[string][]string{ // file: the hooks it may call ("*": any; "": the field itself)
		"runtime.go":   {"", "Close"},
		"namespace.go": {"Namespace"},
	}
	for _, f := range turnFiles {
		allowed[f] = []string{"*"}
	}
	uses := telemetryUses(t)
	if len(uses["turn.go"]) == 0 || len(uses["object.go"]) == 0 {
		t.Fatalf("no hook calls found in turn.go or object.go: got %v; the test no longer finds them", uses)
	}
	for _, file := range slices.Sorted(maps.Keys(uses)) {
		ok := allowed[file]
		for _, use := range uses[file] {
			if !slices.Contains(ok, "*") && !slices.Contains(ok, use.hook) {
				t.Errorf("%s: %s references the telemetry hooks (.tel%s); only the turn's files call them",
					use.pos, file, strings.TrimSuffix("."+use.hook, "."))
			}
		}
	}
}

type telemetryUse struct {
	pos  token.Position
	hook string // the method called, or "" for the field itself
}

// telemetryUses finds, per non-test file of package core, every reference to a field called tel and
// the method called on it, and every use of the type telemetryHooks outside seams.go and runtime.go.
func telemetryUses(t *testing.T) map[string][]telemetryUse {
	t.Helper()
	fset, pkg := parseCore(t)
	uses := map[string][]telemetryUse{}
	for path, f := range pkg.Files {
		file := path[strings.LastIndex(path, "/")+1:]
		called := map[*ast.SelectorExpr]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if m, ok := n.Fun.(*ast.SelectorExpr); ok {
					if x, ok := m.X.(*ast.SelectorExpr); ok && x.Sel.Name == "tel" {
						called[x] = true
						uses[file] = append(uses[file], telemetryUse{fset.Position(n.Pos()), m.Sel.Name})
					}
				}
			case *ast.SelectorExpr:
				if n.Sel.Name == "tel" && !called[n] {
					uses[file] = append(uses[file], telemetryUse{fset.Position(n.Pos()), ""})
				}
			case *ast.Ident:
				if n.Name == "telemetryHooks" && file != "seams.go" && file != "runtime.go" {
					uses[file] = append(uses[file], telemetryUse{fset.Position(n.Pos()), "(type telemetryHooks)"})
				}
			}
			return true
		})
	}
	return uses
}

// Only the turn and the object's lifecycle (turnFiles) call the replicator, an object's field repl
// (seams.go), or compare it; the others ask whether the runtime is in cluster mode
// (Runtime.cluster).
func TestSeams_ReplicatorCalledOnlyByTheTurnAndTheObject(t *testing.T) {
	uses := fieldUses(t, "repl")
	if len(uses["batch.go"]) == 0 || len(uses["object.go"]) == 0 {
		t.Fatalf("no replicator calls found in batch.go or object.go: got %v; the test no longer finds them", uses)
	}
	for _, file := range slices.Sorted(maps.Keys(uses)) {
		if !slices.Contains(turnFiles, file) {
			for _, pos := range uses[file] {
				t.Errorf("%s: %s reaches the replicator (.repl); only the turn's files do", pos, file)
			}
		}
	}
}

// The fields of an object that only the gate holder touches are touched only in turnFiles; the
// alarm run's only in alarm.go.
func TestSeams_GateHolderFieldsStayInTheTurn(t *testing.T) {
	for _, field := range []string{"inst", "built", "store", "fresh", "batch", "lastBatch", "holding", "alarmRun"} {
		files := turnFiles
		if field == "alarmRun" {
			files = []string{"alarm.go", "object.go"}
		}
		uses := fieldUses(t, field)
		if len(uses) == 0 {
			t.Fatalf("no use of the field %s found: the test no longer finds them", field)
		}
		for _, file := range slices.Sorted(maps.Keys(uses)) {
			if !slices.Contains(files, file) {
				for _, pos := range uses[file] {
					t.Errorf("%s: %s touches the gate holder's field %s; only %v do", pos, file, field, files)
				}
			}
		}
	}
}

// fieldUses finds, per non-test file of package core, every selector .name (x.name), where x is
// not a package name the file imports.
func fieldUses(t *testing.T, name string) map[string][]token.Position {
	t.Helper()
	fset, pkg := parseCore(t)
	uses := map[string][]token.Position{}
	for path, f := range pkg.Files {
		file := path[strings.LastIndex(path, "/")+1:]
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != name {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Obj == nil && isImport(f, id.Name) {
				return true
			}
			uses[file] = append(uses[file], fset.Position(sel.Pos()))
			return true
		})
	}
	return uses
}

func isImport(f *ast.File, name string) bool {
	for _, is := range f.Imports {
		path := strings.Trim(is.Path.Value, `"`)
		if is.Name != nil && is.Name.Name == name || is.Name == nil && path[strings.LastIndex(path, "/")+1:] == name {
			return true
		}
	}
	return false
}

// parseCore parses the non-test files of package core.
func parseCore(t *testing.T) (*token.FileSet, *ast.Package) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg := pkgs["core"]
	if pkg == nil {
		t.Fatal("package core not found")
	}
	return fset, pkg
}
