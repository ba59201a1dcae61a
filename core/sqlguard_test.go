package core_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

// S-O5: the three ways TEMP objects got past the authorizer are refused with
// ErrSQLNotAllowed, and what they aimed at still works: Put survives an
// eviction, SetAlarm leaves its alarm pending, stored values are not
// rewritten.
func TestSQLGuard_TempObjectsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, sql string
		check     func(t *testing.T, ctx context.Context, n *note)
	}{
		{"temp table shadowing the KV table", "CREATE TEMP TABLE _durable_kv(key TEXT PRIMARY KEY, value BLOB)",
			func(t *testing.T, ctx context.Context, n *note) {
				require.NoError(t, n.st.Storage().Put(ctx, "k", []byte("kept")))
			}},
		{"temp trigger on the timers table", "CREATE TEMP TRIGGER t AFTER INSERT ON main._durable_timers BEGIN DELETE FROM main._durable_timers; END",
			func(t *testing.T, ctx context.Context, n *note) {
				require.NoError(t, n.st.SetAlarm(ctx, n.st.Now().Add(time.Hour)))
			}},
		{"temp trigger on the KV table", "CREATE TEMP TRIGGER t AFTER INSERT ON main._durable_kv BEGIN UPDATE main._durable_kv SET value = 'evil'; END",
			func(t *testing.T, ctx context.Context, n *note) {
				require.NoError(t, n.st.Storage().Put(ctx, "k", []byte("kept")))
			}},
		{"temp view shadowing the meta table", "CREATE TEMP VIEW _durable_meta AS SELECT 1 AS k, 2 AS v", nil},
		{"trigger on the timers table", "CREATE TRIGGER t BEFORE DELETE ON _durable_timers BEGIN SELECT 1; END", nil},
		{"index named like the runtime's", "CREATE INDEX _durable_i ON lines(text)", nil},
		{"view named like the runtime's", "CREATE VIEW _durable_x AS SELECT 1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			rt, ns := openNoteDir(t, dir)
			s, _ := ns.Get("o")
			err := core.Do(ctx, s, func(ctx context.Context, n *note) error {
				_, err := n.st.Storage().Exec(ctx, tc.sql)
				require.ErrorIs(t, err, core.ErrSQLNotAllowed)
				require.Contains(t, err.Error(), "belongs to the runtime")
				if tc.check != nil {
					tc.check(t, ctx, n)
				}
				return nil
			})
			require.NoError(t, err)
			require.NoError(t, rt.Close()) // evicted: a TEMP object would be gone, and so would what it hid
			_, ns = openNoteDir(t, dir)
			s, _ = ns.Get("o")
			require.NoError(t, core.Do(ctx, s, func(ctx context.Context, n *note) error {
				v, ok, err := n.st.Storage().Get(ctx, "k")
				require.NoError(t, err)
				if tc.check != nil && strings.Contains(tc.sql, "_durable_kv") {
					require.True(t, ok)
					require.Equal(t, "kept", string(v))
				}
				if strings.Contains(tc.sql, "_durable_timers") && tc.check != nil {
					_, pending, err := n.st.GetAlarm(ctx)
					require.NoError(t, err)
					require.True(t, pending, "the alarm is pending")
				}
				return nil
			}))
		})
	}
}

// S-O5: user TEMP tables of their own names still work.
func TestSQLGuard_UserTempTablesAllowed(t *testing.T) {
	ctx := context.Background()
	_, ns := openNoteDir(t, t.TempDir())
	s, _ := ns.Get("o")
	require.NoError(t, core.Do(ctx, s, func(ctx context.Context, n *note) error {
		if _, err := n.st.Storage().Exec(ctx, "CREATE TEMP TABLE scratch(x)"); err != nil {
			return err
		}
		_, err := n.st.Storage().Exec(ctx, "INSERT INTO scratch VALUES (1)")
		return err
	}))
}

// S-O5: every statement of the runtime's own names its tables main.<name>,
// so that nothing of the TEMP schema can stand in for them.
func TestSQLGuard_RuntimeStatementsQualified(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	unqualified := regexp.MustCompile(`(?i)\b(FROM|INTO|UPDATE|TABLE|EXISTS|JOIN)\s+_durable_`)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			if strings.Contains(line, "main._durable_") {
				checked++
			}
			require.False(t, unqualified.MatchString(line), "%s:%d names a runtime table without main.: %s", f, i+1, line)
		}
	}
	require.Greater(t, checked, 10, "the runtime's statements were found")
}
