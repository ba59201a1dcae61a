// Package room is the broadcast room over hibernatable WebSockets: one
// object per room name, every member's WebSocket connected to it, every
// message numbered, kept for a while, and sent to every member in one
// order that all members share. A room costs nothing while its members are
// silent: the object is evicted from memory (hibernates) with its clients
// still connected, and the next message brings it back (SEMANTICS R1-R11).
//
// Register a namespace of rooms and mount its HTTP handler:
//
//	rooms, err := room.Register(rt, "rooms", room.Options{})
//	...
//	mux.Handle("/room/", room.Handler(rooms))
//
// A client joins with a WebSocket to /room/{name}?name=ann, and may add
// since=<offset> to catch up after a reconnect. A plain GET of the same
// path returns the room's State as JSON.
//
// # Wire format
//
// Every message a member sends (text or binary) is broadcast to every
// member, the sender included, as one frame of the same type:
//
//	<offset> <JSON(sender's attachment)>:<message>
//	17 {"name":"ann","joinedAt":1767225600000}:hello
//
// The offset is 1 for a room's first message and grows by one with each
// message. That is the original's JSON(attachment) + ":" + message (SEMANTICS
// R10) with the offset in front. Besides messages the room sends notices,
// text frames starting with '!':
//
//	!live N      after a join (and its replay): N is the latest offset; what follows is live
//	!gap S F     the history no longer reaches back to S+1: the replay starts at F
//
// A client that sends "ping" gets "pong" from the runtime, without waking
// the room (SEMANTICS R3); it must do so at least every StaleAfter (90 s)
// or the pruning alarm closes it with CloseStale (4000). ParseDelivery
// parses a frame; Follow is a client that reconnects by itself.
//
// # Reconnecting
//
// A client keeps the offset of the last message it received and
// reconnects with ?since=<offset>. The room replays the messages after it
// from its history (the latest Options.History, 128 by default), in order,
// before any live message and with no duplicate, because the replay and
// the join are one turn: no message can be handled between them. A client
// that was away longer gets "!gap" first. A restart of the server closes
// every connection with 1001 (SEMANTICS R8); reconnecting the same way
// loses nothing the history still holds.
//
// # Concurrency
//
//   - A room is one object: all its messages are handled one at a time, in
//     the order they arrive, and every member sees that order (R1). That is
//     also a room's ceiling: one message costs one turn (an INSERT, a
//     DELETE, a commit) plus one queued send per member. Shard big rooms,
//     by channel for instance.
//   - Sends leave only after the message is durable in the history: a
//     client never sees a message the room could forget.
//   - The room sends and closes only from its turns (Fetch,
//     WebSocketMessage, Alarm), with the turn's ctx: a send or close
//     outside a turn fails with core.ErrNotInTurn. Code that must push to
//     the members from elsewhere calls the room (core.Do) and sends from
//     that turn.
//   - The runtime writes to each member from its own goroutine with a
//     bounded queue; a member that does not keep up is closed with 1013
//     and never slows the others.
//
// # Caveats
//
//   - Nothing about the members lives in the Room value: after hibernation
//     the constructor runs again and the members are the runtime's list
//     (State.WebSockets) with their attachments. Keep per-member data in
//     the attachment (16 KiB at most) or in storage.
//   - The pruning alarm wakes a room every PruneEvery (60 s) while it has
//     connections, and stops re-arming when the last one is gone (R11).
//   - Replays count against the member's send queue: keep History well
//     below core.Options.WebSocketSendQueue.
//   - The history is in the room's own SQLite database: each message is a
//     durable write. Rooms whose messages need no history should use core
//     directly and send without storing.
package room
