// Package inspectjson is the JSON the workshop's HTTP inspector answers and the durable command
// prints with -json, for the parts both write: a query's answer and an object's tables. Keeping
// them here keeps the two spelled alike.
package inspectjson

import (
	"fmt"
	"unicode/utf8"

	"github.com/durable-go/durable/core"
)

// Query is a query's answer: text as a JSON string, a blob as its text if it is UTF-8, else
// x'<hex>'.
func Query(res core.QueryResult) map[string]any {
	rows := make([][]any, len(res.Rows))
	for i, row := range res.Rows {
		rows[i] = make([]any, len(row))
		for j, v := range row {
			if b, ok := v.([]byte); ok {
				if utf8.Valid(b) {
					v = string(b)
				} else {
					v = fmt.Sprintf("x'%x'", b)
				}
			}
			rows[i][j] = v
		}
	}
	if res.Columns == nil {
		res.Columns = []string{}
	}
	return map[string]any{"columns": res.Columns, "rows": rows, "truncated": res.Truncated}
}

// Table is one table of an object's database.
type Table struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
	Rows    int64    `json:"rows"`
	Runtime bool     `json:"runtime"`
}

// Tables are an object's tables, never null.
func Tables(ts []core.TableInfo) []Table {
	out := make([]Table, len(ts))
	for i, t := range ts {
		out[i] = Table{t.Name, t.Columns, t.Rows, t.Runtime}
	}
	return out
}
