package counter

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// A Sink receives a counter's flushes: the analytics store shared by all
// links.
//
// Write stores each bucket's ABSOLUTE count for the link, replacing what the
// sink held for that (link, bucket). Writing the same counts twice must
// leave the same result: alarms are delivered at least once, and a flush
// whose Write failed, or seemed to, is sent again (SEMANTICS K2, K3).
// Write is called with the counter's input gate open, by one flush at a
// time per link, and by many links at once.
type Sink interface {
	Write(ctx context.Context, link string, counts []Count) error
}

// Count is one bucket of a link's hits: N hits in the minute that starts
// at Bucket.
type Count struct {
	Bucket time.Time
	N      int64
}

// Store is the SQLite implementation of Sink: one database file standing
// for the shared analytics store, with the original's click_rollup table keyed
// by (link_id, bucket). It is safe for concurrent use. The application
// opens it once, passes it in Options.Sink, and closes it after the
// runtime.
type Store struct {
	db *sql.DB
}

const storeSchema = `CREATE TABLE IF NOT EXISTS click_rollup(
  link_id TEXT NOT NULL,
  bucket INTEGER NOT NULL, -- unix ms of the minute
  count INTEGER NOT NULL,
  PRIMARY KEY (link_id, bucket)
) WITHOUT ROWID`

// OpenStore opens (creating if needed) the store's database file at path.
func OpenStore(path string) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("counter: open store: %w", err)
	}
	// Pragmas in the DSN apply to every connection the pool opens.
	dsn := (&url.URL{Scheme: "file", Path: abs}).String() + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("counter: open store: %w", err)
	}
	db.SetMaxOpenConns(1) // one writer at a time: no SQLITE_BUSY between our own flushes
	if _, err := db.Exec(storeSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("counter: open store: %w", err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Write upserts the counts for link in one transaction. The upsert sets the
// count to the value sent (SET count = excluded.count), never adds to it,
// so writing the same counts again changes nothing.
func (s *Store) Write(ctx context.Context, link string, counts []Count) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("counter: store write: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO click_rollup(link_id, bucket, count) VALUES (?, ?, ?)
ON CONFLICT(link_id, bucket) DO UPDATE SET count = excluded.count`)
	if err != nil {
		return fmt.Errorf("counter: store write: %w", err)
	}
	defer stmt.Close()
	for _, c := range counts {
		if _, err := stmt.ExecContext(ctx, link, c.Bucket.UnixMilli(), c.N); err != nil {
			return fmt.Errorf("counter: store write: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("counter: store write: %w", err)
	}
	return nil
}

// Counts returns the link's buckets in time order.
func (s *Store) Counts(ctx context.Context, link string) ([]Count, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT bucket, count FROM click_rollup WHERE link_id = ? ORDER BY bucket", link)
	if err != nil {
		return nil, fmt.Errorf("counter: store counts: %w", err)
	}
	defer rows.Close()
	var out []Count
	for rows.Next() {
		var ms, n int64
		if err := rows.Scan(&ms, &n); err != nil {
			return nil, fmt.Errorf("counter: store counts: %w", err)
		}
		out = append(out, Count{Bucket: time.UnixMilli(ms).UTC(), N: n})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counter: store counts: %w", err)
	}
	return out, nil
}

// Total returns the link's hits over all buckets.
func (s *Store) Total(ctx context.Context, link string) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, "SELECT coalesce(sum(count), 0) FROM click_rollup WHERE link_id = ?", link).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counter: store total: %w", err)
	}
	return n, nil
}
