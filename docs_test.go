// Package durable_test checks the project's documentation: every package
// has a doc comment, and every code block in cookbook.md is code that
// exists in the repository.
package durable_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every package states its promise in a doc comment.
func TestEveryPackageHasADoc(t *testing.T) {
	dirs := sourceDirs(t)
	if len(dirs) == 0 {
		t.Fatal("no packages found")
	}
	for _, dir := range dirs {
		pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for name, pkg := range pkgs {
			documented := false
			for _, f := range pkg.Files {
				if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
					documented = true
				}
			}
			if !documented {
				t.Errorf("package %s in %s has no doc comment", name, dir)
			}
		}
	}
}

// Each fenced code block in cookbook.md is preceded by a line
// <!-- from: path --> and appears verbatim in that file, so the cookbook
// shows only code that compiles and cannot drift from it.
func TestCookbookCodeExists(t *testing.T) {
	for _, doc := range []string{"cookbook.md", "README.md"} {
		t.Run(doc, func(t *testing.T) { checkBlocks(t, doc) })
	}
}

func checkBlocks(t *testing.T, doc string) {
	md, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	from := regexp.MustCompile(`^<!-- from: (\S+) -->$`)
	lines := strings.Split(string(md), "\n")
	blocks := 0
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") || strings.TrimSpace(lines[i]) == "```" {
			continue
		}
		lang := strings.TrimPrefix(lines[i], "```")
		start := i
		var body []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		if lang != "go" {
			continue // shell transcripts and output are not code
		}
		blocks++
		m := from.FindStringSubmatch(strings.TrimSpace(prevNonEmpty(lines, start)))
		if m == nil {
			t.Errorf("%s:%d: go block without a <!-- from: path --> line", doc, start+1)
			continue
		}
		src, err := os.ReadFile(m[1])
		if err != nil {
			t.Errorf("%s:%d: %v", doc, start+1, err)
			continue
		}
		if !strings.Contains(string(src), strings.Join(body, "\n")) {
			t.Errorf("%s:%d: block is not verbatim in %s", doc, start+1, m[1])
		}
	}
	if blocks == 0 {
		t.Errorf("%s has no go blocks", doc)
	}
}

func prevNonEmpty(lines []string, i int) string {
	for i--; i >= 0; i-- {
		if strings.TrimSpace(lines[i]) != "" {
			return lines[i]
		}
	}
	return ""
}
