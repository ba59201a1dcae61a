package sqlstore

import "testing"

// S-W6: the count of arguments a query binds, and empty queries.
func TestParams(t *testing.T) {
	for _, tc := range []struct {
		q     string
		n     int
		empty bool
	}{
		{"", 0, true},
		{"   \n\t", 0, true},
		{"-- a comment\n/* and another */ ;;", 0, true},
		{"/* unterminated", 0, true},
		{"SELECT 1", 0, false},
		{"SELECT ?", 1, false},
		{"SELECT ?, ?", 2, false},
		{"SELECT ?3", 3, false},
		{"SELECT ?2, ?", 3, false},
		{"SELECT ?1, ?1", 1, false},
		{"SELECT :a, @b, $c, :a", 3, false},
		{"SELECT ?; SELECT ?, ?", 2, false},
		{"SELECT '?', \"?\", `?`, [?] -- ?\n/* ? */", 0, false},
		{"SELECT 'it''s ?', ?", 1, false},
		{"SELECT a$b FROM t WHERE x = ?", 1, false},
		{"SELECT x'3f' , ?", 1, false},
	} {
		n, empty := Params(tc.q)
		if n != tc.n || empty != tc.empty {
			t.Errorf("Params(%q) = %d, %v; want %d, %v", tc.q, n, empty, tc.n, tc.empty)
		}
	}
}
