package datadir

import (
	"cmp"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/durable-go/durable/core/internal/runindex"
	"github.com/durable-go/durable/core/internal/sqlstore"
)

// IndexFile is the runtime's own database in the data directory: the alarm index, the dead letters
// and the catalog. It is derived state: the objects' databases are the truth, and it is rebuilt from
// them when it is missing, empty or damaged.
const IndexFile = "_runtime.sqlite"

// Dir is a data directory, with what opening its index needs.
type Dir struct {
	Path        string                 // the directory, absolute
	Log         *slog.Logger           // a rebuild's progress, a file moved aside
	Now         func() time.Time       // stamps the name of a file moved aside
	IsNamespace func(name string) bool // which subdirectories are namespaces' (hold objects)
}

// OpenIndex opens the runtime's file. Missing, empty or damaged (it fails to open or SQLite's quick
// check), it is rebuilt from every object's database: the catalog from their identities, the alarm
// index from their timers tables, the dead letters from the copies they keep. A damaged or empty
// file is moved aside (to _runtime.sqlite.damaged-<time>), never deleted. A file of an earlier
// version, without a catalog, gets its catalog filled the same way.
func (d Dir) OpenIndex() (*runindex.Index, error) {
	path := filepath.Join(d.Path, IndexFile)
	why := ""
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		why = "missing"
		if err := d.moveAside(path, true); err != nil { // a WAL left without its database
			return nil, err
		}
	case err != nil:
		return nil, err
	case fi.Size() == 0:
		why = "empty (0 bytes)"
		if err := d.moveAside(path, false); err != nil {
			return nil, err
		}
	}
	ix, newCatalog, err := runindex.Open(path)
	if err != nil && why == "" {
		why = "damaged: " + err.Error()
		if merr := d.moveAside(path, false); merr != nil {
			return nil, errors.Join(err, merr)
		}
		ix, newCatalog, err = runindex.Open(path)
	}
	if err != nil {
		return nil, err
	}
	if why != "" || newCatalog {
		if err := d.rebuildIndex(ix, why); err != nil {
			ix.Close()
			return nil, fmt.Errorf("rebuild the runtime index: %w", err)
		}
	}
	return ix, nil
}

// moveAside renames the runtime's file (and its WAL and shared memory) out of the way, keeping it
// for inspection. onlyLeftovers moves only the WAL and shared memory (the database is missing).
func (d Dir) moveAside(path string, onlyLeftovers bool) error {
	stamp := ".damaged-" + d.Now().UTC().Format("20060102T150405.000000000Z")
	moved := false
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if suffix == "" && onlyLeftovers {
			continue
		}
		err := os.Rename(path+suffix, path+stamp+suffix)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		moved = moved || err == nil
	}
	if moved {
		d.Log.Warn("the runtime index was moved aside", "event", "index_moved_aside", "file", path, "to", path+stamp)
	}
	return nil
}

// ObjectFile is an object database found on disk.
type ObjectFile struct {
	Path string
	Root bool // a top-level object (its timers table holds its own and its facets' timers)
}

// Scan lists every object database in the data directory: Dir/<namespace>/<id>.sqlite and,
// below each, its facets' (<id>.facets/<id>.sqlite, nested).
func (d Dir) Scan() ([]ObjectFile, error) {
	var out []ObjectFile
	var walk func(dir string, root bool) error
	walk = func(dir string, root bool) error {
		es, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range es {
			name := e.Name()
			switch {
			case e.IsDir() && strings.HasSuffix(name, ".facets"):
				if err := walk(filepath.Join(dir, name), false); err != nil {
					return err
				}
			case !e.IsDir() && strings.HasSuffix(name, ".sqlite") && len(name) == 32+len(".sqlite"):
				out = append(out, ObjectFile{Path: filepath.Join(dir, name), Root: root})
			}
		}
		return nil
	}
	es, err := os.ReadDir(d.Path)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if e.IsDir() && d.IsNamespace(e.Name()) {
			if err := walk(filepath.Join(d.Path, e.Name()), true); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// rebuildIndex fills the index from the objects' databases, logging its progress (every 1,000
// objects or 5 s). why is "" when only the catalog is new (the alarms and dead letters are kept).
func (d Dir) rebuildIndex(ix *runindex.Index, why string) error {
	files, err := d.Scan()
	if err != nil || len(files) == 0 {
		return err
	}
	start := time.Now()
	what := "catalog"
	if why != "" {
		what = "alarm index, dead letters and catalog"
	}
	d.Log.Warn("rebuilding the runtime index from the objects' databases", "event", "index_rebuild",
		"reason", cmp.Or(why, "no catalog yet"), "rebuilds", what, "objects", len(files))
	var objects []runindex.Object
	var alarms []runindex.Alarm
	var letters []runindex.Letter
	skipped := 0
	last := start
	for i, f := range files {
		o, at, dls, err := readObjectFile(d.Path, f)
		if err != nil {
			skipped++
			d.Log.Error("an object database could not be read for the runtime index: it will refuse to serve until restored",
				"event", "index_rebuild_skip", "file", f.Path, "error", err)
			continue
		}
		objects = append(objects, o)
		if why != "" && f.Root {
			if at != 0 {
				alarms = append(alarms, runindex.Alarm{Namespace: o.Namespace, ID: o.ID, Name: o.Name, At: at})
			}
			letters = append(letters, dls...)
		}
		if n := i + 1; n%1000 == 0 || time.Since(last) > 5*time.Second {
			last = time.Now()
			d.Log.Info("rebuilding the runtime index", "event", "index_rebuild_progress", "done", n, "of", len(files))
		}
	}
	if err := ix.Fill(objects, alarms, letters); err != nil {
		return err
	}
	d.Log.Warn("the runtime index is rebuilt", "event", "index_rebuilt", "objects", len(objects), "alarms", len(alarms),
		"dead_letters", len(letters), "unreadable", skipped, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// readObjectFile reads what the index needs from one object database: its catalog entry, its
// earliest timer (0 if none) and the dead letters it keeps.
func readObjectFile(dir string, f ObjectFile) (o runindex.Object, at int64, dls []runindex.Letter, err error) {
	fi, err := os.Stat(f.Path)
	if err != nil {
		return o, 0, nil, err
	}
	if fi.Size() == 0 {
		return o, 0, nil, errors.New("empty (0 bytes)")
	}
	st, err := sqlstore.Open(f.Path, "FULL", "_durable_", nil)
	if err != nil {
		return o, 0, nil, err
	}
	defer st.Close()
	meta := map[string]any{}
	err = st.QueryOwn("SELECT k, v FROM main._durable_meta WHERE k IN ('namespace', 'name', 'created') OR k LIKE 'dead:%'", nil, func(r *sql.Rows) error {
		var k string
		var v any
		err := r.Scan(&k, &v)
		meta[k] = v
		return err
	})
	if err != nil {
		return o, 0, nil, err
	}
	ns, _ := meta["namespace"].(string)
	name, _ := meta["name"].(string)
	if ns == "" {
		return o, 0, nil, errors.New("no identity in _durable_meta")
	}
	rel, _ := filepath.Rel(dir, f.Path)
	o = runindex.Object{Namespace: ns, ID: strings.TrimSuffix(filepath.Base(f.Path), ".sqlite"), Name: name, File: rel,
		Active: fi.ModTime().UnixNano(), Size: FileSize(f.Path)}
	o.Created, _ = meta["created"].(int64)
	if o.Created == 0 {
		o.Created = o.Active
	}
	if !f.Root {
		return o, 0, nil, nil
	}
	var min sql.NullInt64
	err = st.QueryOwn("SELECT min(at) FROM main._durable_timers", nil, func(r *sql.Rows) error { return r.Scan(&min) })
	if err != nil {
		return o, 0, nil, err
	}
	for k, v := range meta {
		if !strings.HasPrefix(k, "dead:") {
			continue
		}
		var dl runindex.Letter // core's DeadLetter, which has the same fields, encoded it
		b, _ := v.(string)
		if bb, ok := v.([]byte); ok {
			b = string(bb)
		}
		if err := json.Unmarshal([]byte(b), &dl); err != nil {
			return o, 0, nil, fmt.Errorf("dead letter %q: %w", k, err)
		}
		dls = append(dls, dl)
	}
	return o, min.Int64, dls, nil
}
