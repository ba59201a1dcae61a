package sqlstore

import (
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// BenchmarkOpenClose measures an open, one row read and a close of one database while others are
// open (open=N), with the connection's own lock (lock=own; Linux) and with SQLite's (lock=sqlite, the
// default VFS): SQLite's walks a list of every open file at each open. cpu-us/op is the process's
// CPU time per open and close, which a loaded machine inflates less than the time.
func BenchmarkOpenClose(b *testing.B) {
	dir := b.TempDir()
	tmpl, err := BuildTemplate(dir, testSchema+"; CREATE TABLE t(v BLOB); INSERT INTO t VALUES (1)")
	if err != nil {
		b.Fatal(err)
	}
	path := func(i int) string { return filepath.Join(dir, strconv.Itoa(i)+".sqlite") }
	for _, open := range []int{10, 4000} {
		for _, lock := range []struct{ name, vfs string }{{"own", ownLockVFS}, {"sqlite", ""}} {
			b.Run("open="+strconv.Itoa(open)+"/lock="+lock.name, func(b *testing.B) {
				var held []*DB
				defer func() {
					for _, db := range held {
						db.Close()
					}
				}()
				for i := range open + 1 {
					if err := os.WriteFile(path(i), tmpl, 0o644); err != nil {
						b.Fatal(err)
					}
					if i == open {
						break
					}
					db, err := open1(path(i), lock.vfs)
					if err != nil {
						b.Fatal(err)
					}
					held = append(held, db)
				}
				var before, after syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &before)
				n := 0
				for b.Loop() {
					n++
					db, err := open1(path(open), lock.vfs)
					if err == nil {
						err = db.QueryOwn("SELECT count(*) FROM t", nil, func(r *sql.Rows) error { return r.Scan(new(int)) })
					}
					if err != nil {
						b.Fatal(err)
					}
					if err := db.Close(); err != nil {
						b.Fatal(err)
					}
				}
				syscall.Getrusage(syscall.RUSAGE_SELF, &after)
				cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
				b.ReportMetric(float64(cpu)/1e3/float64(n), "cpu-us/op")
			})
		}
	}
}

func open1(path, vfs string) (*DB, error) { return open(path, vfs, "FULL", "_own_", nil) }
