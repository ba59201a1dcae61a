package core

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/durable-go/durable/core/internal/datadir"
	"github.com/durable-go/durable/core/internal/runindex"
	"github.com/durable-go/durable/core/internal/sqlstore"
)

// Files a backup writes in its directory: the marker is there from the first byte to the last, the
// manifest once it is complete.
const (
	backupMarker   = "_backup_incomplete"
	backupManifest = "_backup.json"
)

// BackupProgress reports a backup's progress, and, returned by Backup, its result.
type BackupProgress struct {
	Objects int           // object databases copied so far
	Total   int           // object databases to copy (those in the catalog when the backup began)
	Skipped int           // of them, missing or unreadable (each logged; see ErrDamaged)
	Bytes   int64         // bytes written so far
	Elapsed time.Duration // since the backup began
}

// BackupOptions configure Backup.
type BackupOptions struct {
	// Progress, if not nil, is called on Backup's goroutine after each object.
	Progress func(BackupProgress)
}

// Backup writes a consistent copy of the data directory to dst (which must not exist, or be an
// empty directory outside the data directory) while calls keep running: every object in the catalog
// when it begins, one at a time, each through its gate (VACUUM INTO its own connection between two
// turns) so that each copy is a committed state holding every write acknowledged before the backup
// began; then the runtime's file (dead letters, catalog), its alarm index made exact for the copies.
// The copy opens with Open as a normal directory. Objects are copied at different moments: the copy
// is consistent per object, as objects are (no transaction spans two of them).
//
// Until the backup is complete, dst holds a marker file, and Open refuses it with
// ErrIncompleteBackup: an interrupted backup (a crash, a cancelled ctx, an error) is never taken for
// a copy. A complete one holds _backup.json, its manifest.
func (a *Admin) Backup(ctx context.Context, dst string, opts BackupOptions) (BackupProgress, error) {
	rt := a.rt
	start := time.Now()
	var p BackupProgress
	fail := func(err error) (BackupProgress, error) {
		p.Elapsed = time.Since(start)
		return p, fmt.Errorf("core: backup to %s: %w", dst, err)
	}
	if err := rt.enter(); err != nil {
		return fail(err)
	}
	defer rt.leave()
	dst, err := filepath.Abs(dst)
	if err != nil {
		return fail(err)
	}
	if rel, err := filepath.Rel(rt.dir, dst); err == nil && !strings.HasPrefix(rel, "..") {
		return fail(errors.New("the backup directory must be outside the data directory"))
	}
	if es, err := os.ReadDir(dst); err == nil && len(es) > 0 {
		return fail(errors.New("the backup directory exists and is not empty"))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fail(err)
	}
	if err := sqlstore.WriteFileSync(filepath.Join(dst, backupMarker), []byte("a backup is being written here; it is not complete\n")); err != nil {
		return fail(err)
	}
	datadir.SyncDir(dst)
	datadir.SyncDir(filepath.Dir(dst))

	entries, err := rt.ix.List("", "", 0)
	if err != nil {
		return fail(err)
	}
	p.Total = len(entries)
	var copied []runindex.Object
	var alarms []runindex.Alarm
	dirs := map[string]bool{}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		out := filepath.Join(dst, e.File)
		at, n, err := rt.copyObject(ctx, e, out)
		switch {
		case errors.Is(err, ErrDamaged):
			p.Skipped++
			rt.log.Error("backup: an object's database is damaged; it is not in the copy", "event", "backup_skip",
				"namespace", e.Namespace, "name", e.Name, "error", err)
		case err != nil:
			return fail(fmt.Errorf("%s/%q: %w", e.Namespace, e.Name, err))
		default:
			e.Size = n
			copied = append(copied, e)
			dirs[filepath.Dir(out)] = true
			if at != 0 && !datadir.IsFacetFile(e.File) {
				alarms = append(alarms, runindex.Alarm{Namespace: e.Namespace, ID: e.ID, Name: e.Name, At: at})
			}
			p.Bytes += n
		}
		p.Objects++
		p.Elapsed = time.Since(start)
		if opts.Progress != nil {
			opts.Progress(p)
		}
	}
	for d := range dirs { // the copies' names, durable before the manifest says they are there
		datadir.SyncDir(d)
	}
	// The runtime's file last: its dead letters as of now, its catalog and alarm index exactly the
	// copies' (an object's alarm may have moved since its copy was taken).
	n, err := rt.copyIndex(filepath.Join(dst, datadir.IndexFile), copied, alarms)
	if err != nil {
		return fail(err)
	}
	p.Bytes += n
	p.Elapsed = time.Since(start)
	manifest, _ := json.MarshalIndent(map[string]any{
		"source": rt.dir, "started": start.UTC(), "finished": time.Now().UTC(),
		"objects": p.Objects - p.Skipped, "skipped": p.Skipped, "bytes": p.Bytes,
	}, "", "  ")
	if err := sqlstore.WriteFileSync(filepath.Join(dst, backupManifest), append(manifest, '\n')); err != nil {
		return fail(err)
	}
	if err := os.Remove(filepath.Join(dst, backupMarker)); err != nil {
		return fail(err)
	}
	datadir.SyncDir(dst)
	return p, nil
}

// copyObject copies one object's database to out through its gate if its namespace is registered,
// else through copyFacet. It returns the copy's earliest
// timer and size. The directory entry is made durable with the others, at the end.
func (rt *Runtime) copyObject(ctx context.Context, e runindex.Object, out string) (at, size int64, err error) {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return 0, 0, err
	}
	tmp := out + ".tmp"
	os.Remove(tmp)
	defer os.Remove(tmp)
	src := filepath.Join(rt.dir, e.File)
	rt.mu.RLock()
	ns := rt.namespaces[e.Namespace]
	rt.mu.RUnlock()
	if ns != nil && !datadir.IsFacetFile(e.File) {
		err = ns.with(e.Name, e.ID, placement{}, func(o *object) error {
			built := true
			err := o.hold(ctx, func() error {
				var err error
				built = o.hasInstance()
				at, err = o.vacuumInto(tmp)
				return err
			})
			// An object brought into memory only to be copied leaves at once: a backup does not
			// fill memory with every object of the directory.
			if !o.hasStore.Load() && !built && o.tryEvict() {
				o.evict("backup")
			}
			return err
		})
	} else {
		at, err = rt.copyFacet(ctx, e, src, tmp)
	}
	if err != nil {
		return 0, 0, err
	}
	if err := finishCopy(tmp); err != nil {
		return 0, 0, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return 0, 0, err
	}
	return at, datadir.FileSize(out), nil
}

// copyFacet copies a facet's database, or an object's of a namespace not registered, to tmp: through
// the facet's gate if it is resident (its open database holds the file alone: sqlstore.Open), else on
// a connection of its own (an activation that comes meanwhile waits for it, by SQLite's busy timeout).
func (rt *Runtime) copyFacet(ctx context.Context, e runindex.Object, src, tmp string) (int64, error) {
	for {
		f := rt.liveFacet(e)
		if f == nil {
			return vacuumClosed(src, tmp)
		}
		var at int64
		err := f.hold(ctx, func() error {
			var err error
			at, err = f.vacuumInto(tmp)
			return err
		})
		if err != errEvicted {
			return at, err
		}
	}
}

// vacuumInto writes a copy of the object's database, as of its last commit, to path, and returns
// its earliest timer; the gate is held, so no batch is open.
func (o *object) vacuumInto(path string) (int64, error) {
	if st := o.openStore(); st != nil {
		return vacuumStore(st, path, o.rt.opts.Synchronous)
	}
	o.ns.waitClosed(o.id)
	return vacuumClosed(o.place.db, path)
}

// vacuumStore copies an open database and returns its earliest timer.
func vacuumStore(st *store, path, sync string) (int64, error) {
	var at sql.NullInt64
	err := st.QueryOwn("SELECT min(at) FROM main._durable_timers", nil, func(r *sql.Rows) error { return r.Scan(&at) })
	if err != nil {
		return 0, err
	}
	// VACUUM INTO writes its copy with the database's synchronous setting: at FULL, several fsyncs
	// of a file that finishCopy syncs once anyway. The setting is the runtime's again before any
	// turn runs.
	if err := st.ExecOwn("PRAGMA synchronous = OFF"); err != nil {
		return 0, err
	}
	err = st.ExecOwn("VACUUM INTO ?", path)
	if rerr := st.ExecOwn("PRAGMA synchronous = " + sync); err == nil {
		err = rerr
	}
	return at.Int64, err
}

// vacuumClosed copies a database that no turn has open, on a connection of its own.
func vacuumClosed(src, path string) (int64, error) {
	fi, err := os.Stat(src)
	if errors.Is(err, fs.ErrNotExist) && datadir.FileSize(src) == 0 {
		return 0, &DamagedError{Path: src, Reason: "missing, although the catalog lists the object"}
	}
	if err == nil && fi.Size() == 0 {
		return 0, &DamagedError{Path: src, Reason: "empty (0 bytes)"}
	}
	st, err := sqlstore.Open(src, "FULL", "_durable_", func() ([]byte, error) { return nil, errors.New("no database") })
	if err != nil {
		return 0, err
	}
	at, err := vacuumStore(st, path, "FULL")
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil && datadir.IsCorrupt(err) {
		return 0, &DamagedError{Path: src, Reason: err.Error()}
	}
	return at, err
}

// finishCopy makes a copy written by VACUUM INTO (which writes a rollback-journal database) a WAL
// database like the runtime's own, by the header's file format bytes (offsets 18 and 19: 2 means
// WAL, as PRAGMA journal_mode=WAL sets them), and syncs it.
func finishCopy(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	var hdr [20]byte
	if _, err = io.ReadFull(f, hdr[:]); err == nil {
		if string(hdr[:16]) != "SQLite format 3\x00" {
			err = fmt.Errorf("%s: not an SQLite database", path)
		} else if hdr[18] != 2 || hdr[19] != 2 {
			_, err = f.WriteAt([]byte{2, 2}, 18)
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyIndex writes the runtime's file to out with the catalog and alarm index given.
func (rt *Runtime) copyIndex(out string, objects []runindex.Object, alarms []runindex.Alarm) (int64, error) {
	tmp := out + ".tmp"
	os.Remove(tmp)
	defer os.Remove(tmp)
	if err := rt.ix.CopyTo(tmp); err != nil {
		return 0, err
	}
	ix, _, err := runindex.Open(tmp)
	if err != nil {
		return 0, err
	}
	err = ix.Reset(objects, alarms)
	if cerr := ix.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncFile(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		return 0, err
	}
	return datadir.FileSize(out), nil
}

// checkNotIncompleteBackup refuses a directory a backup began and did not finish.
func checkNotIncompleteBackup(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, backupMarker)); err == nil {
		return fmt.Errorf("%w: %s was being written by a backup that did not finish (%s is there); it is not a copy: take the backup again",
			ErrIncompleteBackup, dir, backupMarker)
	}
	return nil
}

// Export writes a consistent copy of the object's database (as of its last commit, taken through its
// gate, between two turns, as Backup copies it) to w, and returns the bytes written. The copy is an
// SQLite database that Restore takes back. It fails with ErrNoObject for an object without storage.
func (a *Admin) Export(ctx context.Context, namespace, name string, w io.Writer) (int64, error) {
	rt := a.rt
	fail := func(n int64, err error) (int64, error) {
		return n, &Error{Op: "export", Namespace: namespace, Name: name, Err: err}
	}
	e, err := rt.lookup(namespace, name)
	if err != nil {
		return fail(0, err)
	}
	if err := rt.enter(); err != nil {
		return fail(0, err)
	}
	defer rt.leave()
	f, err := os.CreateTemp(rt.dir, "_export-*.sqlite")
	if err != nil {
		return fail(0, err)
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp)
	err = viaCaller(ctx, func(ctx context.Context) error {
		_, _, err := rt.copyObject(ctx, e, tmp)
		return err
	})
	var n int64
	if err == nil {
		var src *os.File
		if src, err = os.Open(tmp); err == nil {
			n, err = io.Copy(w, src)
			src.Close()
		}
	}
	if err != nil {
		return fail(n, err)
	}
	return n, nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
