package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// S-O1: a second server on the same -data does not start: it says who holds
// the directory and what to do, instead of answering half its calls with
// SQLITE_BUSY.
func TestServe_DataDirInUse(t *testing.T) {
	dir := t.TempDir()
	startServe(t, "-data", dir)
	var out bytes.Buffer
	err := serve(t.Context(), []string{"-addr", "127.0.0.1:0", "-data", dir}, &out, &out, nil)
	if err == nil {
		t.Fatal("a second server on the same directory started")
	}
	for _, want := range []string{dir, "in use by process " + strconv.Itoa(os.Getpid()), "pass another -data DIR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q lacks %q", err, want)
		}
	}
}

// S-O1: with the default directory held by another run, a run takes a
// directory of its own, says so, and serves.
func TestServe_DefaultDataDirPerRun(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	first := startServe(t)
	shared := filepath.Join(cache, "durable-cookbook")
	if !strings.Contains(first.out.String(), shared) {
		t.Fatalf("the first run does not use the default directory %s:\n%s", shared, first.out.String())
	}
	second := startServe(t)
	out := second.out.String()
	if !strings.Contains(out, "this run uses a data directory of its own: "+shared+"-run-") {
		t.Fatalf("the second run does not say it uses a directory of its own:\n%s", out)
	}
	var st LabState
	second.get(t, "/state?o=x", &st) // it serves
}

// S-O2: GET /objects lists a namespace's objects from the catalog, a page
// at a time.
func TestServe_Objects(t *testing.T) {
	s := startServe(t, "-data", t.TempDir())
	for _, o := range []string{"b", "a", "c"} {
		var v map[string]any
		s.get(t, "/hit?n=1&o="+o, &v)
	}
	var page struct {
		Objects []objectEntry
		Next    string
	}
	s.get(t, "/objects?ns=lab&limit=2", &page)
	if len(page.Objects) != 2 || page.Objects[0].Name != "a" || page.Objects[1].Name != "b" || page.Next != "b" {
		t.Fatalf("first page: %+v", page)
	}
	s.get(t, "/objects?ns=lab&limit=2&after=b", &page)
	if len(page.Objects) != 1 || page.Objects[0].Name != "c" || page.Next != "" {
		t.Fatalf("second page: %+v", page)
	}
	if page.Objects[0].Created == 0 || page.Objects[0].ID == "" {
		t.Errorf("an entry without its creation or id: %+v", page.Objects[0])
	}
}
