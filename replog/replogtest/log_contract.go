package replogtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/durable-go/durable/replog"
)

// contractTimeout bounds each check of the contract suites, so that an engine that hangs fails the
// test instead of stopping it.
const contractTimeout = 30 * time.Second

// contractKeys are keys of the shapes the runtime uses (a namespace, a slash, an object name of
// any characters), chosen so that an engine that folds characters together to fit its own naming
// rules would mix two of them up.
var contractKeys = []string{
	"counters/a.b",
	"counters/a_b",
	"counters/a-b",
	"counters/a b",
	"counters/a*b",
	"counters/a>b",
	"counters/A.B",
	"counters/é",
	"counters/" + string(make([]byte, 3)),
	"other/a.b",
}

// LogContract checks that the logs newLog returns keep the promises of replog.Log: expected-sequence
// appends with exactly one winner, conflicts that append nothing, reads in order up to the last
// record when the read began, trims, blobs, and the alarm index. newLog must return an empty log (or one whose keys
// the test does not share with another) and arrange its own cleanup with t.Cleanup.
func LogContract(t *testing.T, newLog func(t *testing.T) replog.Log) {
	t.Run("Shards", func(t *testing.T) {
		l := newLog(t)
		n := l.Shards()
		if n < 1 {
			t.Fatalf("Shards() = %d; want at least 1", n)
		}
		used := map[int]bool{}
		for i := range 200 {
			key := fmt.Sprintf("counters/k%d", i)
			s := l.ShardOf(key)
			if s < 0 || s >= n {
				t.Fatalf("ShardOf(%q) = %d; want in [0, %d)", key, s, n)
			}
			if again := l.ShardOf(key); again != s {
				t.Fatalf("ShardOf(%q) = %d, then %d", key, s, again)
			}
			used[s] = true
		}
		if n > 1 && len(used) < 2 {
			t.Fatalf("200 keys all went to one shard of %d", n)
		}
	})

	t.Run("EmptyKey", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		seq, rec, err := l.Last(ctx, "counters/none")
		if err != nil || seq != 0 || rec != nil {
			t.Fatalf("Last of a key with no record = %d, %q, %v; want 0, nil, nil", seq, rec, err)
		}
		calls := 0
		if err := l.Read(ctx, "counters/none", 0, func(uint64, []byte) error { calls++; return nil }); err != nil || calls != 0 {
			t.Fatalf("Read of a key with no record: %d calls, %v; want 0, nil", calls, err)
		}
		if err := l.Trim(ctx, "counters/none", 10); err != nil {
			t.Fatalf("Trim of a key with no record: %v", err)
		}
	})

	t.Run("AppendThenLast", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		var last uint64
		for i := range 5 {
			rec := fmt.Appendf(nil, "record %d", i)
			seq, err := l.Append(ctx, "counters/x", last, rec)
			if err != nil {
				t.Fatalf("Append %d after %d: %v", i, last, err)
			}
			if seq <= last {
				t.Fatalf("Append %d returned sequence %d, not after the previous %d", i, seq, last)
			}
			last = seq
			gotSeq, gotRec, err := l.Last(ctx, "counters/x")
			if err != nil || gotSeq != seq || !bytes.Equal(gotRec, rec) {
				t.Fatalf("Last after Append %d = %d, %q, %v; want %d, %q", i, gotSeq, gotRec, err, seq, rec)
			}
		}
	})

	t.Run("RecordBytesKept", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		recs := [][]byte{{}, {0}, {0xff, 0, 0xfe}, bytes.Repeat([]byte("commit "), 1<<16)}
		var last uint64
		for i, rec := range recs {
			seq, err := l.Append(ctx, "counters/bytes", last, rec)
			if err != nil {
				t.Fatalf("Append of record %d (%d bytes): %v", i, len(rec), err)
			}
			last = seq
		}
		i := 0
		err := l.Read(ctx, "counters/bytes", 0, func(_ uint64, rec []byte) error {
			if i < len(recs) && !bytes.Equal(rec, recs[i]) {
				t.Errorf("record %d read back as %d bytes, want %d bytes as appended", i, len(rec), len(recs[i]))
			}
			i++
			return nil
		})
		if err != nil || i != len(recs) {
			t.Fatalf("Read: %d records, %v; want %d", i, err, len(recs))
		}
	})

	t.Run("ConflictAppendsNothing", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		s1 := mustAppend(t, l, "counters/c", 0, "one")
		s2 := mustAppend(t, l, "counters/c", s1, "two")
		for _, expect := range []uint64{0, s1, s2 + 1, s2 + 1000} {
			_, err := l.Append(ctx, "counters/c", expect, []byte("stale"))
			if !errors.Is(err, replog.ErrConflict) {
				t.Errorf("Append expecting %d while the last record is %d: %v; want replog.ErrConflict", expect, s2, err)
			}
			if errors.Is(err, replog.ErrUnknown) {
				t.Errorf("Append expecting %d: a refused append is a known outcome, not replog.ErrUnknown: %v", expect, err)
			}
		}
		seq, rec, err := l.Last(ctx, "counters/c")
		if err != nil || seq != s2 || string(rec) != "two" {
			t.Fatalf("Last after refused appends = %d, %q, %v; want %d, \"two\"", seq, rec, err, s2)
		}
		if got := readAll(t, l, "counters/c", 0); fmt.Sprint(got) != "[one two]" {
			t.Fatalf("records after refused appends = %q, want [one two]", got)
		}
		if _, err := l.Append(ctx, "counters/c", s2, []byte("three")); err != nil {
			t.Fatalf("Append expecting the true last record after conflicts: %v", err)
		}
	})

	t.Run("KeysIndependent", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		last := make(map[string]uint64)
		for round := range 2 {
			for _, key := range contractKeys {
				seq, err := l.Append(ctx, key, last[key], fmt.Appendf(nil, "%s#%d", key, round))
				if err != nil {
					t.Fatalf("Append to %q expecting its own last record %d: %v", key, last[key], err)
				}
				last[key] = seq
			}
		}
		for _, key := range contractKeys {
			got := readAll(t, l, key, 0)
			want := []string{key + "#0", key + "#1"}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
				t.Errorf("records of %q = %q, want %q (keys must not share records)", key, got, want)
			}
			seq, _, err := l.Last(ctx, key)
			if err != nil || seq != last[key] {
				t.Errorf("Last of %q = %d, %v; want %d", key, seq, err, last[key])
			}
		}
	})

	t.Run("RacingAppendersOneWinner", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		const writers, rounds = 8, 5
		var last uint64
		for round := range rounds {
			winners, seqs, other := race(writers, replog.ErrConflict, func(w int) (uint64, error) {
				return l.Append(ctx, "counters/race", last, fmt.Appendf(nil, "r%d w%d", round, w))
			})
			if len(other) > 0 {
				t.Fatalf("round %d: racing appends failed other than by conflict: %v", round, other)
			}
			if len(winners) != 1 {
				t.Fatalf("round %d: %d racing appends expecting %d succeeded (writers %v); want exactly 1", round, len(winners), last, winners)
			}
			seq, rec, err := l.Last(ctx, "counters/race")
			if want := fmt.Sprintf("r%d w%d", round, winners[0]); err != nil || seq != seqs[0] || string(rec) != want {
				t.Fatalf("round %d: Last = %d, %q, %v; want the winner's %d, %q", round, seq, rec, err, seqs[0], want)
			}
			last = seqs[0]
		}
		if got := readAll(t, l, "counters/race", 0); len(got) != rounds {
			t.Fatalf("after %d rounds the key holds %d records %q; want one per round", rounds, len(got), got)
		}
	})

	t.Run("ReadOrderAndAfter", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		var seqs []uint64
		var last uint64
		for i := range 20 {
			last = mustAppend(t, l, "counters/r", last, fmt.Sprint(i))
			seqs = append(seqs, last)
			mustAppend(t, l, fmt.Sprintf("counters/noise%d", i%3), lastOf(t, l, fmt.Sprintf("counters/noise%d", i%3)), "noise")
		}
		for _, from := range []int{-1, 0, 9, 18, 19} {
			after := uint64(0)
			if from >= 0 {
				after = seqs[from]
			}
			var got []uint64
			var vals []string
			err := l.Read(ctx, "counters/r", after, func(seq uint64, rec []byte) error {
				got, vals = append(got, seq), append(vals, string(rec))
				return nil
			})
			if err != nil {
				t.Fatalf("Read after %d: %v", after, err)
			}
			want := seqs[from+1:]
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("Read after %d: sequences %v, want %v", after, got, want)
			}
			for i, v := range vals {
				if v != fmt.Sprint(from+1+i) {
					t.Fatalf("Read after %d: record %d is %q, want %q", after, i, v, fmt.Sprint(from+1+i))
				}
			}
		}
		// A sequence between two records: the records after it.
		if seqs[1] > seqs[0]+1 {
			if got := readAll(t, l, "counters/r", seqs[0]+1); len(got) != 19 || got[0] != "1" {
				t.Fatalf("Read after a sequence between records 0 and 1: %q, want records 1..19", got)
			}
		}
	})

	t.Run("ReadStopsAtError", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		var last uint64
		for i := range 10 {
			last = mustAppend(t, l, "counters/stop", last, fmt.Sprint(i))
		}
		stop := errors.New("enough")
		calls := 0
		err := l.Read(ctx, "counters/stop", 0, func(uint64, []byte) error {
			calls++
			if calls == 3 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || calls != 3 {
			t.Fatalf("Read whose fn fails at the 3rd record: %d calls, %v; want 3 calls and fn's error", calls, err)
		}
	})

	t.Run("ReadBoundedAtStart", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		var last uint64
		for i := range 5 {
			last = mustAppend(t, l, "counters/grow", last, fmt.Sprint(i))
		}
		var got []string
		err := l.Read(ctx, "counters/grow", 0, func(_ uint64, rec []byte) error {
			got = append(got, string(rec))
			if len(got) <= 3 {
				// Records appended while the read runs are not part of it.
				seq, err := l.Append(ctx, "counters/grow", last, []byte("late"))
				if err != nil {
					return err
				}
				last = seq
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Read while appending: %v", err)
		}
		if fmt.Sprint(got) != "[0 1 2 3 4]" {
			t.Fatalf("Read that began with 5 records delivered %q; want the 5 records there were when it began", got)
		}
		if n := len(readAll(t, l, "counters/grow", 0)); n != 8 {
			t.Fatalf("after the read the key holds %d records, want 8", n)
		}
	})

	t.Run("ReadMany", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		const n = 2000
		var last uint64
		for i := range n {
			last = mustAppend(t, l, "counters/many", last, fmt.Sprint(i))
		}
		i := 0
		err := l.Read(ctx, "counters/many", 0, func(_ uint64, rec []byte) error {
			if string(rec) != fmt.Sprint(i) {
				return fmt.Errorf("record %d is %q", i, rec)
			}
			i++
			return nil
		})
		if err != nil || i != n {
			t.Fatalf("Read of %d records: %d delivered, %v", n, i, err)
		}
	})

	t.Run("Trim", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		var seqs []uint64
		var last uint64
		for i := range 10 {
			last = mustAppend(t, l, "counters/t", last, fmt.Sprint(i))
			seqs = append(seqs, last)
		}
		other := mustAppend(t, l, "counters/t2", 0, "kept")
		if err := l.Trim(ctx, "counters/t", seqs[6]); err != nil {
			t.Fatalf("Trim before record 6: %v", err)
		}
		if got := readAll(t, l, "counters/t", 0); fmt.Sprint(got) != "[6 7 8 9]" {
			t.Fatalf("records after Trim before record 6 = %q, want [6 7 8 9]", got)
		}
		seq, rec, err := l.Last(ctx, "counters/t")
		if err != nil || seq != last || string(rec) != "9" {
			t.Fatalf("Last after Trim = %d, %q, %v; want %d, \"9\"", seq, rec, err, last)
		}
		if got := readAll(t, l, "counters/t2", 0); fmt.Sprint(got) != "[kept]" {
			t.Fatalf("Trim of one key changed another: %q", got)
		}
		// Trimming again, or before an older point, removes nothing more.
		for _, before := range []uint64{seqs[6], seqs[2], 0} {
			if err := l.Trim(ctx, "counters/t", before); err != nil {
				t.Fatalf("Trim before %d: %v", before, err)
			}
		}
		if got := readAll(t, l, "counters/t", 0); fmt.Sprint(got) != "[6 7 8 9]" {
			t.Fatalf("records after repeated Trims = %q, want [6 7 8 9]", got)
		}
		// Appends go on from the last record; Trim up to it keeps it.
		last = mustAppend(t, l, "counters/t", last, "10")
		if err := l.Trim(ctx, "counters/t", last); err != nil {
			t.Fatalf("Trim before the last record: %v", err)
		}
		if got := readAll(t, l, "counters/t", 0); fmt.Sprint(got) != "[10]" {
			t.Fatalf("records after Trim before the last = %q, want [10]", got)
		}
		if _, err := l.Append(ctx, "counters/t", last, []byte("11")); err != nil {
			t.Fatalf("Append after Trim, expecting the kept last record: %v", err)
		}
		if _, err := l.Append(ctx, "counters/t2", other, []byte("more")); err != nil {
			t.Fatalf("Append to the untrimmed key: %v", err)
		}
	})

	t.Run("Blobs", func(t *testing.T) {
		l, ctx := newLog(t), contractContext(t)
		var w bytes.Buffer
		if err := l.GetBlob(ctx, "snap/x", "snap/none", &w); !errors.Is(err, replog.ErrNoBlob) {
			t.Fatalf("GetBlob of a name never put: %v; want ErrNoBlob", err)
		}
		big := make([]byte, 3<<20+17)
		for i := range big {
			big[i] = byte(i * 7 / 3)
		}
		names := []string{"snap/a.b", "snap/a_b", "snap/a b", "snap/é*>"}
		for i, name := range names {
			if err := l.PutBlob(ctx, "snap/x", name, bytes.NewReader(append([]byte{byte(i)}, big...))); err != nil {
				t.Fatalf("PutBlob %q (%d bytes): %v", name, len(big)+1, err)
			}
		}
		for i, name := range names {
			w.Reset()
			if err := l.GetBlob(ctx, "snap/x", name, &w); err != nil {
				t.Fatalf("GetBlob %q: %v", name, err)
			}
			if !bytes.Equal(w.Bytes(), append([]byte{byte(i)}, big...)) {
				t.Fatalf("GetBlob %q: %d bytes that differ from the %d put", name, w.Len(), len(big)+1)
			}
		}
		// Replacing.
		if err := l.PutBlob(ctx, "snap/x", names[0], bytes.NewReader([]byte("small"))); err != nil {
			t.Fatalf("PutBlob replacing %q: %v", names[0], err)
		}
		w.Reset()
		if err := l.GetBlob(ctx, "snap/x", names[0], &w); err != nil || w.String() != "small" {
			t.Fatalf("GetBlob after replacing = %d bytes, %v; want \"small\"", w.Len(), err)
		}
		// An empty blob is a blob.
		if err := l.PutBlob(ctx, "snap/x", "snap/empty", bytes.NewReader(nil)); err != nil {
			t.Fatalf("PutBlob of an empty blob: %v", err)
		}
		w.Reset()
		if err := l.GetBlob(ctx, "snap/x", "snap/empty", &w); err != nil || w.Len() != 0 {
			t.Fatalf("GetBlob of an empty blob = %d bytes, %v; want 0, nil", w.Len(), err)
		}
		// Deleting.
		if err := l.DeleteBlob(ctx, "snap/x", names[1]); err != nil {
			t.Fatalf("DeleteBlob %q: %v", names[1], err)
		}
		if err := l.GetBlob(ctx, "snap/x", names[1], io.Discard); !errors.Is(err, replog.ErrNoBlob) {
			t.Fatalf("GetBlob after DeleteBlob: %v; want ErrNoBlob", err)
		}
		w.Reset()
		if err := l.GetBlob(ctx, "snap/x", names[2], &w); err != nil || w.Len() != len(big)+1 {
			t.Fatalf("GetBlob of another name after a DeleteBlob = %d bytes, %v", w.Len(), err)
		}
		// A failed read of the source stores nothing in place of the old blob.
		broken := io.MultiReader(bytes.NewReader([]byte("partial")), errReader{})
		if err := l.PutBlob(ctx, "snap/x", names[2], broken); err == nil {
			t.Fatalf("PutBlob from a reader that fails: nil error")
		}
		w.Reset()
		if err := l.GetBlob(ctx, "snap/x", names[2], &w); err != nil && !errors.Is(err, replog.ErrNoBlob) {
			t.Fatalf("GetBlob after a failed PutBlob: %v", err)
		} else if err == nil && !bytes.Equal(w.Bytes(), append([]byte{2}, big...)) {
			t.Fatalf("GetBlob after a failed PutBlob returned %d bytes: neither the old blob nor none", w.Len())
		}
	})

	alarmContract(t, newLog)
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("source failed") }

func contractContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), contractTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustAppend(t *testing.T, l replog.Log, key string, expect uint64, rec string) uint64 {
	t.Helper()
	seq, err := l.Append(contractContext(t), key, expect, []byte(rec))
	if err != nil {
		t.Fatalf("Append to %q expecting %d: %v", key, expect, err)
	}
	return seq
}

func lastOf(t *testing.T, l replog.Log, key string) uint64 {
	t.Helper()
	seq, _, err := l.Last(contractContext(t), key)
	if err != nil {
		t.Fatalf("Last of %q: %v", key, err)
	}
	return seq
}

func readAll(t *testing.T, l replog.Log, key string, after uint64) []string {
	t.Helper()
	var recs []string
	if err := l.Read(contractContext(t), key, after, func(_ uint64, rec []byte) error {
		recs = append(recs, string(rec))
		return nil
	}); err != nil {
		t.Fatalf("Read of %q after %d: %v", key, after, err)
	}
	return recs
}

func mustGet(t *testing.T, ls replog.Leases, shard int, rev uint64, val string) {
	t.Helper()
	gotRev, gotVal, err := ls.Get(contractContext(t), shard)
	if err != nil || gotRev != rev || string(gotVal) != val {
		t.Fatalf("Get of shard %d = %d, %q, %v; want %d, %q", shard, gotRev, gotVal, err, rev, val)
	}
}

// race runs op for writers 0..n-1 at once and returns the writers that succeeded with their
// results, and the errors other than conflict.
func race(n int, conflict error, op func(w int) (uint64, error)) (winners []int, results []uint64, other []error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := range n {
		wg.Go(func() {
			r, err := op(w)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners, results = append(winners, w), append(results, r)
			case !errors.Is(err, conflict):
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	return winners, results, other
}
