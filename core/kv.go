package core

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/durable-go/durable/core/internal/sqlstore"
)

// Limits of the KV API.
const (
	MaxKeyLen   = 2048    // bytes in a key
	MaxValueLen = 1 << 20 // bytes in a value
)

// Entry is one key and its value, as returned by List.
type Entry struct {
	Key   string
	Value []byte
}

// Get returns the value stored under key and whether there was one.
func (s *Storage) Get(ctx context.Context, key string) (v []byte, ok bool, err error) {
	_, st, err := s.in(ctx)
	if err != nil {
		return nil, false, err
	}
	err = st.QueryOwn("SELECT value FROM _durable_kv WHERE key = ?", []any{key}, func(rows *sql.Rows) error {
		ok = true
		return rows.Scan(&v)
	})
	if err != nil {
		return nil, false, fmt.Errorf("core: kv get: %w", err)
	}
	if ok {
		s.o.reads.Add(1)
	}
	return v, ok, nil
}

// Put stores value under key, replacing any value there.
func (s *Storage) Put(ctx context.Context, key string, value []byte) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes (must be 1 to %d)", ErrTooLarge, len(key), MaxKeyLen)
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("%w: value of %d bytes (limit %d)", ErrTooLarge, len(value), MaxValueLen)
	}
	st, err := s.writer(ctx)
	if err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	if err := st.ExecOwn("INSERT INTO _durable_kv(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value); err != nil {
		return fmt.Errorf("core: kv put: %w", err)
	}
	s.o.writes.Add(1)
	return nil
}

// Delete removes key and reports whether it was there.
func (s *Storage) Delete(ctx context.Context, key string) (bool, error) {
	st, err := s.writer(ctx)
	if err != nil {
		return false, err
	}
	res, err := st.ExecOwnResult("DELETE FROM _durable_kv WHERE key = ?", key)
	if err != nil {
		return false, fmt.Errorf("core: kv delete: %w", err)
	}
	n, _ := res.RowsAffected()
	s.o.writes.Add(n)
	return n > 0, nil
}

// List returns the entries whose keys start with prefix, in key order: at most limit if limit > 0.
func (s *Storage) List(ctx context.Context, prefix string, limit int) ([]Entry, error) {
	_, st, err := s.in(ctx)
	if err != nil {
		return nil, err
	}
	var out []Entry
	err = st.QueryOwn("SELECT key, value FROM _durable_kv WHERE key >= ? ORDER BY key", []any{prefix}, func(rows *sql.Rows) error {
		var e Entry
		if err := rows.Scan(&e.Key, &e.Value); err != nil {
			return err
		}
		if !strings.HasPrefix(e.Key, prefix) || limit > 0 && len(out) >= limit {
			return sqlstore.ErrStop
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("core: kv list: %w", err)
	}
	s.o.reads.Add(int64(len(out)))
	return out, nil
}

// GetJSON decodes the JSON value stored under key into a V.
func GetJSON[V any](ctx context.Context, s *Storage, key string) (V, bool, error) {
	var v V
	b, ok, err := s.Get(ctx, key)
	if err != nil || !ok {
		return v, ok, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, true, fmt.Errorf("core: kv %q: %w", key, err)
	}
	return v, true, nil
}

// PutJSON stores v as JSON under key.
func PutJSON(ctx context.Context, s *Storage, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("core: kv %q: %w", key, err)
	}
	return s.Put(ctx, key, b)
}
