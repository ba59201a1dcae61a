package inventory_test

import (
	"context"
	"testing"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
	"github.com/durable-go/durable/patterns/inventory"
	"github.com/stretchr/testify/require"
)

// An item written by the constructor of before migrations (which ran this
// statement itself) opens with its stock and version intact.
func TestInventory_OpensItemsWrittenBeforeMigrations(t *testing.T) {
	dir := t.TempDir()
	coretest.Seed(t, dir, "items", "sku-old", `CREATE TABLE IF NOT EXISTS item(
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	stock   INTEGER NOT NULL CHECK (stock >= 0),
	version INTEGER NOT NULL
);
INSERT OR IGNORE INTO item(id, stock, version) VALUES (1, 0, 0)`, "UPDATE item SET stock = 7, version = 3 WHERE id = 1")

	rt := coretest.Open(t, core.Options{Dir: dir})
	items, err := inventory.Register(rt, "items", inventory.Options{})
	require.NoError(t, err)
	sku, err := items.Get("sku-old")
	require.NoError(t, err)
	ok, err := core.Call(context.Background(), sku, func(ctx context.Context, inv *inventory.Inventory) (bool, error) {
		return inv.ReserveVersioned(ctx, 2)
	})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 5, stockOf(t, sku))
}
