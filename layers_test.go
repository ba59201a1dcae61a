package durable_test

import (
	"bufio"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/durable-go/durable"

// sourceDirs returns every directory that holds non-test Go files, outside hidden directories and
// testdata.
func sourceDirs(t *testing.T) []string {
	t.Helper()
	set := map[string]bool{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != "." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			set[filepath.Dir(p)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, 0, len(set))
	for d := range set {
		dirs = append(dirs, filepath.ToSlash(d))
	}
	slices.Sort(dirs)
	return dirs
}

// imports returns the module's packages that dir's non-test files import, by path inside the
// module ("core", "core/internal/replica" ...).
func imports(t *testing.T, dir string) []string {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, is := range f.Imports {
				path, _ := strconv.Unquote(is.Path.Value)
				if rest, ok := strings.CutPrefix(path, module+"/"); ok && !slices.Contains(out, rest) {
					out = append(out, rest)
				}
			}
		}
	}
	return out
}

// The layers import downwards only: no internal package imports the package above it, the
// replication contract (replog) imports nothing of the runtime, and the JetStream engine (cluster)
// knows only that contract, not the runtime.
func TestLayers_ImportDirections(t *testing.T) {
	checked := 0
	for _, dir := range sourceDirs(t) {
		deps := imports(t, dir)
		for _, dep := range deps {
			var why string
			switch {
			case strings.Contains(dir, "/internal/") || strings.HasPrefix(dir, "internal/"):
				// An internal package may import leaf packages (other internal packages, replog),
				// never the package it is internal to.
				parent, _, _ := strings.Cut(dir, "/internal/")
				if strings.HasPrefix(dir, "internal/") {
					parent = "."
				}
				if dep == parent || parent == "." && !strings.Contains(dep, "internal/") && dep != "replog" {
					why = "an internal package imports the package above it"
				}
			case dir == "replog" || strings.HasPrefix(dir, "replog/"):
				if dep != "replog" && dep != "internal/logrecord" {
					why = "the replication contract imports the runtime"
				}
			case dir == "cluster":
				if dep != "replog" {
					why = "the engine imports more than the replication contract"
				}
			}
			if why != "" {
				t.Errorf("%s imports %s: %s", dir, dep, why)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no imports found: the test no longer reads the packages")
	}
}

// No source file is a room of its own: each one stays under 500 lines, split by concept past that.
func TestLayers_FilesUnder500Lines(t *testing.T) {
	const limit = 500
	for _, dir := range sourceDirs(t) {
		if !strings.HasPrefix(dir, "core") && !strings.HasPrefix(dir, "replog") {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			if n := countLines(t, f); n > limit {
				t.Errorf("%s has %d lines; split it by concept below %d", f, n, limit)
			}
		}
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for s := bufio.NewScanner(f); s.Scan(); {
		n++
	}
	return n
}

// Package core's exported surface stays small: at most 153 entries as `go doc -all` lists them (a
// const or var group, a type, a function, a method each).
func TestLayers_CoreSurface(t *testing.T) {
	const limit = 153
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "core", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	files := make([]*ast.File, 0, len(pkgs["core"].Files))
	for _, f := range pkgs["core"].Files {
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, module+"/core")
	if err != nil {
		t.Fatal(err)
	}
	n := len(p.Consts) + len(p.Vars) + len(p.Funcs)
	for _, typ := range p.Types {
		n += 1 + len(typ.Consts) + len(typ.Vars) + len(typ.Funcs) + len(typ.Methods)
	}
	t.Logf("package core exports %d entries", n)
	if n > limit {
		t.Errorf("package core exports %d entries (go doc -all ./core); at most %d", n, limit)
	}
}
