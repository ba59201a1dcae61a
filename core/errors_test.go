package core_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// S-G3: a full queue fails at once with an error callers classify as
// overloaded and retryable; nothing queued before it is lost.
func TestCall_OverloadedFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := openRT(t, core.Options{MaxQueue: 3})
		s := get(t, register(t, rt), "hot")
		release := make(chan struct{})
		go core.Do(context.Background(), s, func(context.Context, *item) error { <-release; return nil })
		synctest.Wait()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
					n, err := it.stock(ctx)
					if err != nil {
						return err
					}
					return it.setStock(ctx, n+1)
				}))
			})
		}
		synctest.Wait()
		err := core.Do(context.Background(), s, func(context.Context, *item) error { return nil })
		require.ErrorIs(t, err, core.ErrOverloaded)
		require.ErrorIs(t, err, core.ErrOverloaded)
		require.True(t, core.IsRetryable(err))
		require.False(t, errors.As(err, new(*core.RemoteError)))
		var ce *core.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "hot", ce.Name)
		close(release)
		wg.Wait()
		require.Equal(t, 3, stockOf(t, s), "the three queued calls all ran")
	})
}

// S-G3: a commit that could not be made durable fails the call with an
// error callers classify as retryable and not the object's own; the turn's
// writes are lost whole, and the same call retried succeeds. Here the
// runtime's alarm index is kept locked by another process's transaction
// until the commit gives up (SQLite's busy timeout, 10 s of real time: the
// test runs in parallel with the others).
func TestCall_FailedCommitIsRetryable(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		c := openClocks(t, core.Options{Dir: dir}, nil, nil)
		s := mustGet(t, c.ns, "o")
		arm := func(ctx context.Context, cl *clock) error {
			if err := cl.st.Storage().Put(ctx, "armed", []byte("yes")); err != nil {
				return err
			}
			return cl.st.SetAlarm(ctx, cl.st.Now().Add(time.Hour))
		}
		require.NoError(t, core.Do(context.Background(), s, func(context.Context, *clock) error { return nil }))

		other, err := sql.Open("sqlite", filepath.Join(dir, "_runtime.sqlite"))
		require.NoError(t, err)
		defer other.Close()
		conn, err := other.Conn(context.Background())
		require.NoError(t, err)
		_, err = conn.ExecContext(context.Background(), "BEGIN IMMEDIATE")
		require.NoError(t, err)
		err = core.Do(context.Background(), s, arm)
		require.ErrorIs(t, err, core.ErrCommitFailed)
		require.True(t, core.IsRetryable(err))
		require.False(t, errors.As(err, new(*core.RemoteError)))
		var ce *core.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "o", ce.Name)
		_, err = conn.ExecContext(context.Background(), "ROLLBACK")
		require.NoError(t, err)
		require.NoError(t, conn.Close())

		armed, err := core.Call(context.Background(), s, func(ctx context.Context, cl *clock) (bool, error) {
			_, ok, err := cl.st.Storage().Get(ctx, "armed")
			return ok, err
		})
		require.NoError(t, err)
		require.False(t, armed, "the failed commit's writes are lost")
		_, ok := c.alarm(t, "o")
		require.False(t, ok)

		require.NoError(t, core.Do(context.Background(), s, arm), "the same call, retried")
		_, ok = c.alarm(t, "o")
		require.True(t, ok)
	})
}

// A cancelled context is honoured while the call waits in the queue, and
// the cancelled call never runs.
func TestCall_CancelledWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := openRT(t, core.Options{})
		s := get(t, register(t, rt), "c")
		release := make(chan struct{})
		go core.Do(context.Background(), s, func(context.Context, *item) error { <-release; return nil })
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		ran := false
		done := make(chan error)
		go func() {
			done <- core.Do(ctx, s, func(context.Context, *item) error { ran = true; return nil })
		}()
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		close(release)
		require.Equal(t, 0, stockOf(t, s))
		require.False(t, ran)
	})
}

// Calls on a closed runtime fail with ErrClosed.
func TestCall_ClosedRuntime(t *testing.T) {
	rt, err := core.Open(core.Options{})
	require.NoError(t, err)
	ns := register(t, rt)
	s := get(t, ns, "a")
	setStock(t, s, 1)
	require.NoError(t, rt.Close())
	err = core.Do(context.Background(), s, func(context.Context, *item) error { return nil })
	require.ErrorIs(t, err, core.ErrClosed)
	_, err = core.Register(rt, "other", newItem)
	require.ErrorIs(t, err, core.ErrClosed)
	require.NoError(t, rt.Close(), "Close twice is fine")
}

// Close waits for the running turn and fails the queued ones.
func TestClose_WaitsForRunningTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt, err := core.Open(core.Options{})
		require.NoError(t, err)
		s := get(t, register(t, rt), "a")
		release := make(chan struct{})
		first := make(chan error)
		go func() {
			first <- core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
				<-release
				return it.setStock(ctx, 5)
			})
		}()
		synctest.Wait()
		queued := make(chan error)
		go func() { queued <- core.Do(context.Background(), s, func(context.Context, *item) error { return nil }) }()
		synctest.Wait()
		closed := make(chan error)
		go func() { closed <- rt.Close() }()
		synctest.Wait()
		close(release)
		require.NoError(t, <-first)
		require.ErrorIs(t, <-queued, core.ErrClosed)
		require.NoError(t, <-closed)
	})
}

// Names: empty, too long and invalid UTF-8 are refused; anything else is a
// name that cannot escape the data directory.
func TestGet_Names(t *testing.T) {
	dir := t.TempDir()
	rt := openRT(t, core.Options{Dir: dir})
	ns := register(t, rt)
	for _, bad := range []string{"", strings.Repeat("x", core.MaxNameLen+1), "\xff\xfe"} {
		_, err := ns.Get(bad)
		require.ErrorIs(t, err, core.ErrInvalidName, "name %q", bad)
	}
	for _, good := range []string{"../../x", "a\x00b", "🦫", "/etc/passwd", strings.Repeat("y", core.MaxNameLen)} {
		s := get(t, ns, good)
		setStock(t, s, 4)
		require.Equal(t, 4, stockOf(t, s), "name %q", good)
	}
	var files []string
	require.NoError(t, filepath.WalkDir(filepath.Dir(dir), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".sqlite") && p != filepath.Join(dir, "_runtime.sqlite") {
			files = append(files, p)
		}
		return err
	}))
	require.Len(t, files, 5)
	for _, f := range files {
		require.Equal(t, filepath.Join(dir, "items"), filepath.Dir(f), "every database is in the namespace directory")
	}
	for _, badNS := range []string{"", "../x", "a/b", "1abc", strings.Repeat("n", 65)} {
		_, err := core.Register(rt, badNS, newItem)
		require.ErrorIs(t, err, core.ErrInvalidName, "namespace %q", badNS)
	}
	_, err := core.Register(rt, "items", newItem)
	require.Error(t, err, "a namespace is registered once")
}

// Bad SQL gets a clear error; the turn can go on, and nothing is lost.
func TestStorage_BadSQL(t *testing.T) {
	rt := openRT(t, core.Options{})
	s := get(t, register(t, rt), "a")
	setStock(t, s, 9)
	err := core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
		_, err := it.st.Storage().Exec(ctx, "INSERT INTO nosuch VALUES (1)")
		require.ErrorContains(t, err, "no such table: nosuch")
		_, err = it.st.Storage().Exec(ctx, "SELEKT 1")
		require.ErrorContains(t, err, "syntax error")
		err = it.st.Storage().QueryRow(ctx, "SELECT stock FROM item WHERE id = 2").Scan(new(int))
		require.ErrorIs(t, err, core.ErrNoRows)
		return it.setStock(ctx, 8) // the turn goes on
	})
	require.NoError(t, err)
	require.Equal(t, 8, stockOf(t, s))
}

// The runtime owns transactions: user SQL cannot begin, commit, roll back,
// attach, change settings or write the runtime's tables.
func TestStorage_TransactionControlIsRefused(t *testing.T) {
	rt := openRT(t, core.Options{})
	s := get(t, register(t, rt), "a")
	setStock(t, s, 9)
	for _, q := range []string{
		"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT x", "RELEASE turn", "END",
		"UPDATE item SET stock = 0; COMMIT",
		"ATTACH DATABASE '/tmp/x.db' AS x", "PRAGMA synchronous = OFF", "PRAGMA journal_mode = DELETE",
		"DELETE FROM _durable_meta", "INSERT INTO _durable_kv VALUES ('k', 'v')", "DROP TABLE _durable_kv",
	} {
		err := core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
			_, err := it.st.Storage().Exec(ctx, q)
			return err
		})
		require.ErrorIs(t, err, core.ErrSQLNotAllowed, "query %q", q)
	}
	require.Equal(t, 9, stockOf(t, s), "the refused multi-statement write was rolled back with its turn")
	n, err := core.Call(context.Background(), s, func(ctx context.Context, it *item) (int, error) {
		var n int
		err := it.st.Storage().QueryRow(ctx, "SELECT count(*) FROM pragma_table_info('item')").Scan(&n)
		return n, err
	})
	require.NoError(t, err)
	require.Equal(t, 2, n, "reading pragmas is fine")
}

// Transaction commits on nil, rolls back on error, and nests.
func TestStorage_Transaction(t *testing.T) {
	rt := openRT(t, core.Options{})
	s := get(t, register(t, rt), "a")
	setStock(t, s, 1)
	err := core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
		st := it.st.Storage()
		require.NoError(t, st.Transaction(ctx, func() error { return it.setStock(ctx, 2) }))
		err := st.Transaction(ctx, func() error {
			require.NoError(t, it.setStock(ctx, 3))
			require.NoError(t, st.Transaction(ctx, func() error { return it.setStock(ctx, 4) }))
			return errors.New("undo")
		})
		require.EqualError(t, err, "undo")
		n, err := it.stock(ctx)
		require.Equal(t, 2, n)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, 2, stockOf(t, s))
}

// A -> B -> A completes: a call from inside a turn opens the caller's gate.
func TestCall_ReentrantChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := openRT(t, core.Options{})
		ns := register(t, rt)
		a, b := get(t, ns, "a"), get(t, ns, "b")
		got, err := core.Call(context.Background(), a, func(ctx context.Context, _ *item) (int, error) {
			return core.Call(ctx, b, func(ctx context.Context, _ *item) (int, error) {
				return core.Call(ctx, a, func(ctx context.Context, it *item) (int, error) {
					return 42, it.setStock(ctx, 42)
				})
			})
		})
		require.NoError(t, err)
		require.Equal(t, 42, got)
		require.Equal(t, 42, stockOf(t, a))
	})
}

// Group commit: under 64 concurrent callers one commit serves many turns.
func TestCall_GroupCommit(t *testing.T) {
	rt := openRT(t, core.Options{})
	s := get(t, register(t, rt), "g")
	setStock(t, s, 0)
	before := rt.Stats()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 20 {
				require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
					n, err := it.stock(ctx)
					if err != nil {
						return err
					}
					return it.setStock(ctx, n+1)
				}))
			}
		})
	}
	wg.Wait()
	after := rt.Stats()
	turns, commits := after.Turns-before.Turns, after.Commits-before.Commits
	require.Equal(t, 64*20, stockOf(t, s))
	t.Logf("%d turns, %d commits (%.1f turns per commit)", turns, commits, float64(turns)/float64(commits))
	require.Less(t, commits*4, turns, "commits must be far below turns")
}

// An idle object is evicted: the constructor runs again on the next call,
// storage survives, memory does not.
func TestObject_IdleEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := openRT(t, core.Options{IdleTimeout: 10 * time.Second})
		s := get(t, register(t, rt), "e")
		setStock(t, s, 5)
		require.NoError(t, core.Do(context.Background(), s, func(_ context.Context, it *item) error { it.memo = 1; return nil }))
		require.EqualValues(t, 1, rt.Stats().Constructs)
		time.Sleep(5 * time.Second)
		require.EqualValues(t, 1, rt.Stats().Resident, "not idle long enough")
		time.Sleep(7 * time.Second)
		synctest.Wait()
		require.EqualValues(t, 0, rt.Stats().Resident)
		require.EqualValues(t, 0, rt.Stats().OpenDBs)
		memo, err := core.Call(context.Background(), s, func(_ context.Context, it *item) (int, error) { return it.memo, nil })
		require.NoError(t, err)
		require.Equal(t, 0, memo, "in-memory state is gone")
		require.Equal(t, 5, stockOf(t, s), "stored state survives")
		require.EqualValues(t, 2, rt.Stats().Constructs)
	})
}

// S-R6: what keeps an object from hibernating is a turn still under way:
// one waiting on a timer (Sleep), on I/O (any Await), or on an outbound
// call to another object. Once they end, the idle timeout evicts them all.
func TestObject_WhatKeepsItResident(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := openRT(t, core.Options{IdleTimeout: 10 * time.Second})
		ns := register(t, rt)
		io, reply := make(chan struct{}), make(chan struct{})
		slept := make(chan error, 1)
		go func() {
			slept <- core.Do(context.Background(), get(t, ns, "timer"), func(ctx context.Context, it *item) error { return it.st.Sleep(ctx, time.Minute) })
		}()
		var wg sync.WaitGroup
		for name, fn := range map[string]func(context.Context, *item) error{
			"io": func(ctx context.Context, it *item) error {
				return it.st.Await(ctx, func(context.Context) error { <-io; return nil })
			},
			"caller": func(ctx context.Context, it *item) error {
				return core.Do(ctx, get(t, ns, "callee"), func(context.Context, *item) error { <-reply; return nil })
			},
		} {
			wg.Go(func() { require.NoError(t, core.Do(context.Background(), get(t, ns, name), fn)) })
		}
		time.Sleep(45 * time.Second)
		synctest.Wait()
		require.EqualValues(t, 4, rt.Stats().Resident, "timer, io, caller and its callee")
		close(io)
		close(reply)
		wg.Wait()
		time.Sleep(11 * time.Second)
		synctest.Wait()
		require.EqualValues(t, 1, rt.Stats().Resident, "only the sleeper, still asleep")
		require.NoError(t, <-slept)
		time.Sleep(11 * time.Second)
		synctest.Wait()
		require.Zero(t, rt.Stats().Resident)
		require.EqualValues(t, 4, rt.Stats().Evictions)
	})
}

// The open-database bound evicts the least recently used idle objects.
func TestObject_OpenDatabaseBound(t *testing.T) {
	rt := openRT(t, core.Options{MaxOpenObjects: 10})
	ns := register(t, rt)
	for i := range 40 {
		setStock(t, get(t, ns, "o"+string(rune('A'+i))), i)
	}
	require.LessOrEqual(t, rt.Stats().OpenDBs, int64(10))
	for i := range 40 {
		require.Equal(t, i, stockOf(t, get(t, ns, "o"+string(rune('A'+i)))))
	}
}

// A failing constructor fails the call, and the next call tries again.
func TestObject_ConstructorError(t *testing.T) {
	rt := openRT(t, core.Options{})
	fail := true
	ns, err := core.Register(rt, "fragile", func(ctx context.Context, st *core.State) (*item, error) {
		if fail {
			fail = false
			return nil, errors.New("not today")
		}
		return newItem(ctx, st)
	})
	require.NoError(t, err)
	s := get(t, ns, "x")
	err = core.Do(context.Background(), s, func(context.Context, *item) error { return nil })
	require.ErrorContains(t, err, "not today")
	require.True(t, errors.As(err, new(*core.RemoteError)))
	require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, it *item) error { return it.setStock(ctx, 1) }))
}

// Storage outside a turn fails clearly: with a ctx that marks no turn, with
// the ctx of a turn that has ended, and inside Await's fn.
func TestStorage_OutsideTurn(t *testing.T) {
	rt := openRT(t, core.Options{})
	var kept *core.State
	var keptCtx context.Context // the constructor's: its turn ends before the test uses it
	ns, err := core.Register(rt, "leaky", func(ctx context.Context, st *core.State) (*item, error) {
		kept, keptCtx = st, ctx
		return newItem(ctx, st)
	})
	require.NoError(t, err)
	s := get(t, ns, "x")
	setStock(t, s, 1)
	_, err = kept.Storage().Exec(context.Background(), "UPDATE item SET stock = 0")
	require.ErrorIs(t, err, core.ErrNotInTurn)
	_, err = kept.Storage().Exec(keptCtx, "UPDATE item SET stock = 0")
	require.ErrorIs(t, err, core.ErrNotInTurn, "the ctx of a turn that has ended")
	require.ErrorIs(t, kept.Await(context.Background(), func(context.Context) error { return nil }), core.ErrNotInTurn)
	// New with the ctx API: inside Await's fn the gate is open, so its ctx
	// marks no turn and storage there fails; after Await the turn's ctx
	// works again.
	require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
		err := it.st.Await(ctx, func(ctx context.Context) error {
			_, err := it.stock(ctx)
			return err
		})
		require.ErrorIs(t, err, core.ErrNotInTurn)
		return it.setStock(ctx, 2)
	}))
	require.Equal(t, 2, stockOf(t, s))
}

// The KV API: bytes and JSON, list by prefix, delete; DeleteAll clears all.
func TestStorage_KVAndDeleteAll(t *testing.T) {
	rt := openRT(t, core.Options{})
	s := get(t, register(t, rt), "kv")
	type pt struct{ X, Y int }
	require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
		st := it.st.Storage()
		require.NoError(t, st.Put(ctx, "a/1", []byte("one")))
		require.NoError(t, st.Put(ctx, "a/2", []byte("two")))
		require.NoError(t, st.Put(ctx, "b/1", []byte("x")))
		require.NoError(t, core.PutJSON(ctx, st, "p", pt{1, 2}))
		return nil
	}))
	require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
		st := it.st.Storage()
		v, ok, err := st.Get(ctx, "a/1")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "one", string(v))
		_, ok, err = st.Get(ctx, "zzz")
		require.NoError(t, err)
		require.False(t, ok)
		es, err := st.List(ctx, core.ListOptions{Prefix: "a/"})
		require.NoError(t, err)
		require.Equal(t, []core.Entry{{Key: "a/1", Value: []byte("one")}, {Key: "a/2", Value: []byte("two")}}, es)
		p, ok, err := core.GetJSON[pt](ctx, st, "p")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, pt{1, 2}, p)
		gone, err := st.Delete(ctx, "a/2")
		require.NoError(t, err)
		require.True(t, gone)
		require.ErrorIs(t, st.Put(ctx, "", nil), core.ErrTooLarge)
		return nil
	}))
	require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, it *item) error {
		st := it.st.Storage()
		_, err := st.Exec(ctx, "CREATE VIEW v AS SELECT * FROM item; CREATE INDEX ix ON item(stock)")
		require.NoError(t, err)
		require.NoError(t, st.DeleteAll(ctx))
		_, err = it.stock(ctx)
		require.ErrorContains(t, err, "no such table")
		es, err := st.List(ctx, core.ListOptions{})
		require.NoError(t, err)
		require.Empty(t, es)
		require.NoError(t, st.Put(ctx, "after", []byte("ok")))
		return nil
	}))
	stats, err := core.Call(context.Background(), s, func(_ context.Context, it *item) (core.StorageStats, error) {
		return it.st.Storage().Stats(), nil
	})
	require.NoError(t, err)
	require.Positive(t, stats.RowsWritten)
	require.Positive(t, stats.RowsRead)
}
