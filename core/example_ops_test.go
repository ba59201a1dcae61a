package core_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/durable-go/durable/core"
)

// An operator's tour of a data directory: one owner, the catalog, a backup
// while calls run, and a damaged object set aside.
func ExampleAdmin() {
	ctx := context.Background()
	base, _ := os.MkdirTemp("", "ops-")
	defer os.RemoveAll(base)
	dir := filepath.Join(base, "data")

	rt, err := core.Open(core.Options{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := core.Open(core.Options{Dir: dir}); errors.Is(err, core.ErrLocked) {
		fmt.Println("a second runtime on the directory: refused")
	}
	accounts, _ := core.Register(rt, "accounts", func(_ context.Context, st *core.State) (*Wallet, error) { return &Wallet{st: st}, nil })
	for _, name := range []string{"carol", "alice", "bob"} {
		a, _ := accounts.Get(name)
		core.Do(ctx, a, func(ctx context.Context, acc *Wallet) error { return acc.Deposit(ctx, 10) })
	}

	// Every object with storage, in name order, a page at a time.
	for o, err := range accounts.All(ctx) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("object", o.Name)
	}

	// A consistent copy while calls run; it opens as a data directory.
	p, err := rt.Admin().Backup(ctx, filepath.Join(base, "backup"), core.BackupOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("backed up %d objects\n", p.Objects)

	// A damaged object refuses to serve; quarantine it, restore its copy.
	bob, _ := accounts.Get("bob")
	rt.Close()
	os.Truncate(filepath.Join(dir, "accounts", bob.ID()+".sqlite"), 0)
	rt, _ = core.Open(core.Options{Dir: dir})
	defer rt.Close()
	accounts, _ = core.Register(rt, "accounts", func(_ context.Context, st *core.State) (*Wallet, error) { return &Wallet{st: st}, nil })
	bob, _ = accounts.Get("bob")
	_, err = core.Call(ctx, bob, func(ctx context.Context, acc *Wallet) (int, error) { return acc.Balance(ctx) })
	fmt.Println("damaged:", errors.Is(err, core.ErrDamaged))
	err = rt.Admin().Restore(ctx, "accounts", "bob", filepath.Join(base, "backup", "accounts", bob.ID()+".sqlite"))
	fmt.Println("restored:", err == nil)
	n, _ := core.Call(ctx, bob, func(ctx context.Context, acc *Wallet) (int, error) { return acc.Balance(ctx) })
	fmt.Println("bob's balance:", n)
	// Output:
	// a second runtime on the directory: refused
	// object alice
	// object bob
	// object carol
	// backed up 3 objects
	// damaged: true
	// restored: true
	// bob's balance: 10
}

// Wallet is a balance in an object's KV storage.
type Wallet struct{ st *core.State }

func (a *Wallet) Balance(ctx context.Context) (int, error) {
	n, _, err := core.GetJSON[int](ctx, a.st.Storage(), "balance")
	return n, err
}

func (a *Wallet) Deposit(ctx context.Context, amount int) error {
	n, err := a.Balance(ctx)
	if err != nil {
		return err
	}
	return core.PutJSON(ctx, a.st.Storage(), "balance", n+amount)
}
