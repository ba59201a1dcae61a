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

// Only the turn (turn.go) and the object's lifecycle (object.go) call the telemetry hooks, the
// runtime's field tel (seams.go). The runtime makes and closes them (runtime.go), and a namespace
// takes its counts and attributes from them (namespace.go); no other file of package core
// references them.
func TestSeams_TelemetryHooksCalledOnlyByTheTurnAndTheObject(t *testing.T) {
	allowed := map[string][]string{ // file: the hooks it may call ("*": any; "": the field itself)
		"turn.go":      {"*"},
		"object.go":    {"*"},
		"runtime.go":   {"", "Close"},
		"namespace.go": {"Namespace"},
	}
	uses := telemetryUses(t)
	if len(uses["turn.go"]) == 0 || len(uses["object.go"]) == 0 {
		t.Fatalf("no hook calls found in turn.go or object.go: got %v; the test no longer finds them", uses)
	}
	for _, file := range slices.Sorted(maps.Keys(uses)) {
		ok := allowed[file]
		for _, use := range uses[file] {
			if !slices.Contains(ok, "*") && !slices.Contains(ok, use.hook) {
				t.Errorf("%s: %s references the telemetry hooks (.tel%s); only turn.go and object.go call them",
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
