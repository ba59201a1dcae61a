package core

import (
	"database/sql"
	"time"
)

// A relayed WebSocket's messages are delivered once across the loss of the object's owner. An
// edge numbers each connection's messages (wireWS.Seq), and a message's turn that wrote something
// records its number in the object's own database, committed with the turn's writes
// (_durable_wsin: per connection, the highest number delivered). When the owner is lost after it
// was sent messages and before it answered, the edge sends them to the next owner marked as sent
// before (wireWS.Resent), and that owner skips those its commits record: the turns that committed
// are not run a second time, those that did not are run once. A message whose turn wrote nothing
// left nothing to lose; it is run again (its sends may be repeated).

// wsInSchema records the messages delivered per relayed connection. at is when the row was last
// written (unix ms, the owner's clock): a row older than wsInKeep is of no use, as an edge sends a
// message again only within its grace (a few lease times), and is deleted.
const wsInSchema = `CREATE TABLE IF NOT EXISTS main._durable_wsin(sock TEXT PRIMARY KEY, seq INTEGER NOT NULL, at INTEGER NOT NULL) WITHOUT ROWID`

// wsInKeep is how long a connection's row is kept after its last write.
const wsInKeep = 10 * time.Minute

// frameNum is a relayed message's number on its connection.
type frameNum struct {
	sock   string
	seq    uint64
	resent bool  // sent before to an owner lost before it answered
	turn   *turn // the message's turn, once it runs (set and read in it)
}

// frameKey is the context key of a relayed message's turn: its frameNum.
type frameKey struct{}

// recordFrame records, at an Await in turn t, the relayed message t runs, if t wrote anything: the
// commit at the Await makes those writes durable, so a message sent again by its edge after the
// owner is lost must find itself delivered, as a turn cut by a crash after an Await is not run
// again in one process either (its writes before the Await stand, those after are lost).
func recordFrame(t *turn) error {
	if n, ok := t.Context.Value(frameKey{}).(*frameNum); ok && n.turn == t { // not a turn it called
		return n.record(t)
	}
	return nil
}

// seen reports, in the message's turn, whether the object's commits record the message delivered.
func (n *frameNum) seen(t *turn) (bool, error) {
	if !n.resent {
		return false, nil
	}
	st, err := t.db()
	if err != nil {
		return false, err
	}
	var tables int
	if err := st.QueryOwn("SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = '_durable_wsin'", nil,
		func(rows *sql.Rows) error { return rows.Scan(&tables) }); err != nil || tables == 0 {
		return false, err
	}
	var done uint64
	err = st.QueryOwn("SELECT seq FROM main._durable_wsin WHERE sock = ?", []any{n.sock},
		func(rows *sql.Rows) error { return rows.Scan(&done) })
	return err == nil && done >= n.seq, err
}

// record records, in the message's turn, the message delivered, if the turn's commit writes
// anything: a turn that wrote nothing has nothing to commit, and no record is worth a commit.
func (n *frameNum) record(t *turn) error {
	if !t.wrote() {
		return nil
	}
	st, err := t.write()
	if err != nil {
		return err
	}
	if err := st.ExecOwn(wsInSchema); err != nil {
		return err
	}
	now := t.o.rt.now().UnixMilli()
	if err := st.ExecOwn(`INSERT INTO main._durable_wsin(sock, seq, at) VALUES (?, ?, ?)
ON CONFLICT(sock) DO UPDATE SET seq = max(seq, excluded.seq), at = excluded.at`, n.sock, n.seq, now); err != nil {
		return err
	}
	if n.seq%64 == 1 { // now and then, and at a connection's first message
		return st.ExecOwn("DELETE FROM main._durable_wsin WHERE at < ?", now-wsInKeep.Milliseconds())
	}
	return nil
}
