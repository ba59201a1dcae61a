package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/durable-go/durable/core"
)

// Account's schema is two steps: the table, then a column added later.
// Every account runs each step once, in its constructor; an account made
// with step 1 only gets step 2 at its next activation.
type Account struct{ st *core.State }

var accountSchema = []core.Migration{
	core.SQL("CREATE TABLE balance(id INTEGER PRIMARY KEY CHECK (id = 1), cents INTEGER NOT NULL)"),
	core.SQL("ALTER TABLE balance ADD COLUMN currency TEXT NOT NULL DEFAULT 'EUR'"),
}

func NewAccount(ctx context.Context, st *core.State) (*Account, error) {
	if err := st.Storage().Migrate(ctx, accountSchema...); err != nil {
		return nil, err
	}
	return &Account{st: st}, nil
}

func ExampleStorage_Migrate() {
	rt, _ := core.Open(core.Options{})
	defer rt.Close()
	ns, _ := core.Register(rt, "accounts", NewAccount)
	stub, _ := ns.Get("acct-1")
	core.Do(context.Background(), stub, func(ctx context.Context, a *Account) error {
		s := a.st.Storage()
		s.Exec(ctx, "INSERT INTO balance(id, cents) VALUES (1, 500)")
		var cents int
		var currency string
		err := s.One(ctx, "SELECT cents, currency FROM balance").Scan(&cents, &currency)
		fmt.Println(cents, currency)
		return err
	})
	// Output:
	// 500 EUR
}

func ExampleStorage_List() {
	rt, _ := core.Open(core.Options{})
	defer rt.Close()
	ns, _ := core.Register(rt, "carts", func(_ context.Context, st *core.State) (*core.State, error) { return st, nil })
	stub, _ := ns.Get("cart-1")
	core.Do(context.Background(), stub, func(ctx context.Context, st *core.State) error {
		s := st.Storage()
		s.PutMany(ctx, map[string][]byte{"item/apple": []byte("2"), "item/pear": []byte("1"), "item/plum": []byte("5"), "note": []byte("gift")})
		last, err := s.List(ctx, core.ListOptions{Prefix: "item/", Reverse: true, Limit: 2})
		for _, e := range last {
			fmt.Println(e.Key, string(e.Value))
		}
		return err
	})
	// Output:
	// item/plum 5
	// item/pear 1
}

func ExampleNamespace_NewUniqueID() {
	rt, _ := core.Open(core.Options{})
	defer rt.Close()
	ns, _ := core.Register(rt, "uploads", func(_ context.Context, st *core.State) (*core.State, error) { return st, nil })
	name := ns.NewUniqueID() // hand it to the uploader; nobody else can guess it
	stub, _ := ns.Get(name)
	fmt.Println(len(stub.Name()))
	// Output:
	// 26
}

// Feed loads its settings from another service when it is activated. The
// calls that arrive meanwhile wait: none sees the feed half set up.
type Feed struct {
	st       *core.State
	settings string
}

func NewFeed(ctx context.Context, st *core.State) (*Feed, error) {
	f := &Feed{st: st}
	err := st.BlockConcurrencyWhile(ctx, func(ctx context.Context) error {
		// A network call would go here; the gate stays closed while it waits.
		if err := st.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
		f.settings = "loaded"
		return nil
	})
	return f, err
}

func ExampleState_BlockConcurrencyWhile() {
	rt, _ := core.Open(core.Options{})
	defer rt.Close()
	ns, _ := core.Register(rt, "feeds", NewFeed)
	stub, _ := ns.Get("news")
	got, _ := core.Call(context.Background(), stub, func(_ context.Context, f *Feed) (string, error) { return f.settings, nil })
	fmt.Println(got)
	// Output:
	// loaded
}
