package core

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Entry is one key and its value, as returned by List.
type Entry struct {
	Key   string
	Value []byte
}

// checkKey refuses a key the KV API cannot store.
func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes (must be 1 to %d)", ErrTooLarge, len(key), MaxKeyLen)
	}
	return nil
}

// checkBatch refuses a batch of more than MaxBatchKeys keys.
func checkBatch(op string, n int) error {
	if n > MaxBatchKeys {
		return fmt.Errorf("%w: %s of %d keys (at most %d in one call)", ErrInvalidArgument, op, n, MaxBatchKeys)
	}
	return nil
}

// Get returns the value stored under key and whether there was one.
func (s *Storage) Get(ctx context.Context, key string) (v []byte, ok bool, err error) {
	_, st, err := s.in(ctx)
	if err != nil {
		return nil, false, err
	}
	err = st.QueryOwn("SELECT value FROM main._durable_kv WHERE key = ?", []any{key}, func(rows *sql.Rows) error {
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

// GetMany returns the values stored under keys (at most MaxBatchKeys), by key; a key with no value
// is absent from the map.
func (s *Storage) GetMany(ctx context.Context, keys []string) (map[string][]byte, error) {
	if err := checkBatch("kv get", len(keys)); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(keys))
	for _, k := range keys {
		if _, done := out[k]; done {
			continue
		}
		v, ok, err := s.Get(ctx, k)
		if err != nil {
			return nil, err
		}
		if ok {
			out[k] = v
		}
	}
	return out, nil
}

// Put stores value under key, replacing any value there.
func (s *Storage) Put(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
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
	if err := st.ExecOwn("INSERT INTO main._durable_kv(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value); err != nil {
		return fmt.Errorf("core: kv put: %w", err)
	}
	s.o.writes.Add(1)
	return nil
}

// PutMany stores every entry (at most MaxBatchKeys), all or none: a key or value over its limit
// fails the call before anything is written.
func (s *Storage) PutMany(ctx context.Context, entries map[string][]byte) error {
	if err := checkBatch("kv put", len(entries)); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		if err := checkKey(k); err != nil {
			return err
		}
		if n := len(entries[k]); n > MaxValueLen {
			return fmt.Errorf("%w: value of %d bytes under %q (limit %d)", ErrTooLarge, n, short(k), MaxValueLen)
		}
	}
	return s.Transaction(ctx, func() error {
		for _, k := range slices.Sorted(maps.Keys(entries)) {
			if err := s.Put(ctx, k, entries[k]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Delete removes key and reports whether it was there.
func (s *Storage) Delete(ctx context.Context, key string) (bool, error) {
	st, err := s.writer(ctx)
	if err != nil {
		return false, err
	}
	res, err := st.ExecOwnResult("DELETE FROM main._durable_kv WHERE key = ?", key)
	if err != nil {
		return false, fmt.Errorf("core: kv delete: %w", err)
	}
	n, _ := res.RowsAffected()
	s.o.writes.Add(n)
	return n > 0, nil
}

// DeleteMany removes keys (at most MaxBatchKeys) and returns how many were there.
func (s *Storage) DeleteMany(ctx context.Context, keys []string) (int, error) {
	if err := checkBatch("kv delete", len(keys)); err != nil {
		return 0, err
	}
	n := 0
	err := s.Transaction(ctx, func() error {
		for _, k := range keys {
			ok, err := s.Delete(ctx, k)
			if err != nil {
				return err
			}
			if ok {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// ListOptions select the entries List returns, as the original's list options do. The zero value
// lists every entry in key order.
type ListOptions struct {
	Prefix     string // only keys that start with it
	Start      string // only keys >= Start
	StartAfter string // only keys > StartAfter; not with Start
	End        string // only keys < End
	Reverse    bool   // in descending key order (with Limit: the last entries)
	Limit      int    // at most this many entries; 0 means no limit
}

// List returns the entries opts selects, in key order (descending with Reverse). Keys compare as
// bytes. Start and StartAfter together, or a negative Limit, fail with ErrInvalidArgument.
func (s *Storage) List(ctx context.Context, opts ListOptions) ([]Entry, error) {
	switch {
	case opts.Start != "" && opts.StartAfter != "":
		return nil, fmt.Errorf("%w: list: Start and StartAfter cannot be used together", ErrInvalidArgument)
	case opts.Limit < 0:
		return nil, fmt.Errorf("%w: list: negative Limit %d", ErrInvalidArgument, opts.Limit)
	}
	_, st, err := s.in(ctx)
	if err != nil {
		return nil, err
	}
	// The lower bound is the greatest of Start, StartAfter and Prefix; the upper the least of End
	// and the first key past every key with the prefix.
	var where []string
	var args []any
	lo, loOp := opts.Prefix, ">="
	if opts.Start > lo {
		lo = opts.Start
	}
	if opts.StartAfter != "" && opts.StartAfter >= lo {
		lo, loOp = opts.StartAfter, ">"
	}
	if lo != "" || loOp == ">" {
		where, args = append(where, "key "+loOp+" ?"), append(args, lo)
	}
	hi, hasHi := opts.End, opts.End != ""
	if p, ok := prefixEnd(opts.Prefix); ok && (!hasHi || p < hi) {
		hi, hasHi = p, true
	}
	if hasHi {
		where, args = append(where, "key < ?"), append(args, hi)
	}
	q := "SELECT key, value FROM main._durable_kv"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY key"
	if opts.Reverse {
		q += " DESC"
	}
	q += " LIMIT ?"
	args = append(args, cmp.Or(opts.Limit, -1))
	var out []Entry
	err = st.QueryOwn(q, args, func(rows *sql.Rows) error {
		var e Entry
		err := rows.Scan(&e.Key, &e.Value)
		out = append(out, e)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("core: kv list: %w", err)
	}
	s.o.reads.Add(int64(len(out)))
	return out, nil
}

// prefixEnd returns the least key greater than every key that starts with prefix, if there is one.
func prefixEnd(prefix string) (string, bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
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
