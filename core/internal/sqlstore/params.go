package sqlstore

import "strconv"

// Params reports how many arguments query binds and whether it holds a statement at all (not only
// white space, comments and semicolons). Every statement of a query binds from the same argument
// list, by position (?, ?NNN) or by name (:a, @a, $a, each name one position), so the count is the
// largest number of parameters of any one of them.
func Params(query string) (n int, empty bool) {
	empty = true
	most, names := 0, map[string]int(nil)
	endStmt := func() {
		n = max(n, most)
		most, names = 0, nil
	}
	for i := 0; i < len(query); {
		c := query[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			i = skipPast(query, i+2, "\n")
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			i = skipPast(query, i+2, "*/")
		case c == ';':
			endStmt()
			i++
		case c == '\'' || c == '"' || c == '`':
			empty = false
			i = skipQuoted(query, i+1, c)
		case c == '[':
			empty = false
			i = skipPast(query, i+1, "]")
		case c == '?':
			empty = false
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			if j == i+1 {
				most++
			} else if k, err := strconv.Atoi(query[i+1 : j]); err == nil {
				most = max(most, k)
			} else {
				most = max(most, 1<<30) // out of range: SQLite refuses the statement
			}
			i = j
		case (c == ':' || c == '@' || c == '$') && i+1 < len(query) && isIdentChar(query[i+1]):
			empty = false
			j := i + 1
			for j < len(query) && isIdentChar(query[j]) {
				j++
			}
			name := query[i:j]
			if _, seen := names[name]; !seen {
				if names == nil {
					names = map[string]int{}
				}
				most++
				names[name] = most
			}
			i = j
		case isIdentChar(c):
			empty = false
			for i < len(query) && (isIdentChar(query[i]) || query[i] == '$') {
				i++
			}
		default:
			empty = false
			i++
		}
	}
	endStmt()
	return n, empty
}

func isIdentChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c >= 0x80
}

// skipPast returns the index after the first end at or after i, or len(q).
func skipPast(q string, i int, end string) int {
	for ; i+len(end) <= len(q); i++ {
		if q[i:i+len(end)] == end {
			return i + len(end)
		}
	}
	return len(q)
}

// skipQuoted returns the index after the quote that closes a quoted token begun before i; a doubled
// quote inside it stands for itself.
func skipQuoted(q string, i int, quote byte) int {
	for i < len(q) {
		if q[i] == quote {
			if i+1 < len(q) && q[i+1] == quote {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return len(q)
}
