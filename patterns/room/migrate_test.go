package room_test

import (
	"context"
	"testing"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/core/coretest"
	"github.com/durable-go/durable/patterns/room"
	"github.com/stretchr/testify/require"
)

// A room written by the constructor of before migrations (which ran step 1
// itself) opens at its latest offset.
func TestRoom_OpensRoomsWrittenBeforeMigrations(t *testing.T) {
	dir := t.TempDir()
	coretest.Seed(t, dir, "rooms", "lobby", `CREATE TABLE IF NOT EXISTS room_messages(
  seq INTEGER PRIMARY KEY,   -- the message's offset: 1, 2, 3, ...
  line BLOB NOT NULL,        -- the frame as members receive it
  binary INTEGER NOT NULL)`, "INSERT INTO room_messages VALUES (1, 'a', 0), (2, 'b', 0), (3, 'c', 0)")

	_, rooms := openRT(t, core.Options{Dir: dir}, room.Options{})
	lobby, err := rooms.Get("lobby")
	require.NoError(t, err)
	st, err := core.Call(context.Background(), lobby, func(_ context.Context, r *room.Room) (room.State, error) { return r.State() })
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Offset)
}
