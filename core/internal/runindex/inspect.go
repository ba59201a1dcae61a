package runindex

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Namespaces returns the namespaces with at least one catalog entry, in byte order.
func (ix *Index) Namespaces() ([]string, error) {
	if err := ix.Flush(); err != nil {
		return nil, err
	}
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	rows, err := ix.conn.QueryContext(context.Background(), "SELECT DISTINCT ns FROM objects ORDER BY ns")
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ns string
		if err := rows.Scan(&ns); err != nil {
			return nil, fmt.Errorf("catalog: %w", err)
		}
		out = append(out, ns)
	}
	return out, rows.Err()
}

// Check runs SQLite's integrity check on the index's file and returns its verdict ("ok" when sound).
func (ix *Index) Check() (string, error) {
	if err := ix.Flush(); err != nil {
		return "", err
	}
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	var verdict string
	err := ix.conn.QueryRowContext(context.Background(), "PRAGMA integrity_check(1)").Scan(&verdict)
	return verdict, err
}

// LookupName returns the catalog entry of the object (or facet) called name in namespace ns.
func (ix *Index) LookupName(ns, name string) (Object, bool, error) {
	if err := ix.Flush(); err != nil {
		return Object{}, false, err
	}
	ix.connMu.Lock()
	defer ix.connMu.Unlock()
	o := Object{Namespace: ns, Name: name}
	err := ix.conn.QueryRowContext(context.Background(), "SELECT id, file, created, active, size FROM objects WHERE ns = ? AND name = ?", ns, name).
		Scan(&o.ID, &o.File, &o.Created, &o.Active, &o.Size)
	if errors.Is(err, sql.ErrNoRows) {
		return Object{}, false, nil
	}
	if err != nil {
		return Object{}, false, fmt.Errorf("catalog: %w", err)
	}
	return o, true, nil
}
