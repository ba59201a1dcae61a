package core_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/durable-go/durable/core"
)

// Inspecting an object: its tables and alarm, and read-only SQL on its
// database, the runtime's tables included; a write is refused.
func ExampleAdmin_Inspect() {
	ctx := context.Background()
	rt, _ := core.Open(core.Options{})
	defer rt.Close()
	accounts, _ := core.Register(rt, "accounts", func(_ context.Context, st *core.State) (*Wallet, error) { return &Wallet{st: st}, nil })
	alice, _ := accounts.Get("alice")
	core.Do(ctx, alice, func(ctx context.Context, w *Wallet) error { return w.Deposit(ctx, 10) })

	rep, err := rt.Admin().Inspect(ctx, "accounts", "alice")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range rep.Tables {
		fmt.Println(t.Name, t.Columns, t.Rows, "runtime:", t.Runtime)
	}
	fmt.Println("alarm set:", !rep.Alarm.IsZero())

	res, err := rt.Admin().Query(ctx, "accounts", "alice", 10, "SELECT key, CAST(value AS TEXT) FROM _durable_kv")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Columns, res.Rows)

	_, err = rt.Admin().Query(ctx, "accounts", "alice", 10, "DELETE FROM _durable_kv")
	fmt.Println("refused:", errors.Is(err, core.ErrReadOnly))
	// Output:
	// _durable_kv [key value] 1 runtime: true
	// _durable_meta [k v] 3 runtime: true
	// _durable_timers [owner key at retry first kind payload cron missed running] 0 runtime: true
	// alarm set: false
	// [key CAST(value AS TEXT)] [[balance 10]]
	// refused: true
}
