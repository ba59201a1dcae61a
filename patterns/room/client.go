package room

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// A Delivery is one room message as a member receives it.
type Delivery struct {
	Offset int64           // its place in the room's order: 1, 2, 3, ...
	From   json.RawMessage // the sender's attachment, {"name":...,"joinedAt":...}
	Data   []byte          // the message as the sender sent it
	Binary bool
}

// ErrGap is returned by Follow when the room's history no longer reaches
// back to the last offset it saw: some messages are lost to this client.
var ErrGap = errors.New("room: history gap")

// ParseDelivery parses a frame of the room's wire format,
// "<offset> <JSON(attachment)>:<message>". Notices (frames starting with
// '!') are not deliveries: ok is false for them.
func ParseDelivery(frame []byte, binary bool) (d Delivery, ok bool, err error) {
	if len(frame) > 0 && frame[0] == '!' {
		return Delivery{}, false, nil
	}
	sp := bytes.IndexByte(frame, ' ')
	if sp < 0 {
		return Delivery{}, false, fmt.Errorf("room: bad frame %.40q", frame)
	}
	off, err := strconv.ParseInt(string(frame[:sp]), 10, 64)
	if err != nil {
		return Delivery{}, false, fmt.Errorf("room: bad offset in frame %.40q", frame)
	}
	rest := frame[sp+1:]
	// The attachment is a JSON object: find its end, then the colon.
	dec := json.NewDecoder(bytes.NewReader(rest))
	var from json.RawMessage
	if err := dec.Decode(&from); err != nil {
		return Delivery{}, false, fmt.Errorf("room: bad attachment in frame %.40q: %w", frame, err)
	}
	n := int(dec.InputOffset())
	if n >= len(rest) || rest[n] != ':' {
		return Delivery{}, false, fmt.Errorf("room: no ':' after the attachment in frame %.40q", frame)
	}
	return Delivery{Offset: off, From: from, Data: rest[n+1:], Binary: binary}, true, nil
}

// Follow joins the room at rawURL (ws://host/room/lobby?name=ann) and calls
// fn with every message after offset since (-1: from the next live one),
// in order and once each, until ctx is done or fn fails.
//
// When the connection drops (a restart closes every WebSocket with 1001,
// SEMANTICS R8), or a live message skips offsets (in cluster mode, a
// connection the room's new node did not list yet when a message was
// sent, SEMANTICS CL18), Follow reconnects with ?since= the last offset it passed
// to fn, after a pause that doubles from 100 ms up to 5 s, so fn misses
// nothing the room's history still holds. If the history no longer
// reaches back that far, Follow returns an error wrapping ErrGap. It pings
// every 30 s so that the room does not prune it as stale.
func Follow(ctx context.Context, rawURL string, since int64, fn func(Delivery) error) error {
	base, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	last := since
	pause := 100 * time.Millisecond
	for {
		u := *base
		if last >= 0 {
			q := u.Query()
			q.Set("since", strconv.FormatInt(last, 10))
			u.RawQuery = q.Encode()
		}
		c, _, err := websocket.DefaultDialer.DialContext(ctx, u.String(), nil)
		if err == nil {
			pause = 100 * time.Millisecond
			err = follow(ctx, c, &last, fn)
			c.Close()
			var ce *websocket.CloseError
			if err != nil && !errors.As(err, &ce) {
				return err // fn's error, a gap, or ctx
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// follow reads one connection until it ends. It returns a
// *websocket.CloseError when the connection ended (and should be dialled
// again), or why Follow should stop.
func follow(ctx context.Context, c *websocket.Conn, last *int64, fn func(Delivery) error) error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() { // the pinger, owned by this call
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				c.Close() // unblocks the read below
				return
			case <-t.C:
				c.WriteMessage(websocket.TextMessage, []byte(Ping))
			}
		}
	})
	for {
		typ, frame, err := c.ReadMessage()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) {
				err = &websocket.CloseError{Code: websocket.CloseAbnormalClosure, Text: err.Error()}
			}
			return err
		}
		if n, ok := bytes.CutPrefix(frame, []byte("!live ")); ok {
			if off, err := strconv.ParseInt(string(n), 10, 64); err == nil && *last < 0 {
				*last = off // reconnect from here, not from whatever is live then
			}
			continue
		}
		if bytes.HasPrefix(frame, []byte("!gap ")) {
			return fmt.Errorf("%w: %s", ErrGap, frame[5:])
		}
		if typ == websocket.TextMessage && string(frame) == Pong {
			continue
		}
		d, ok, err := ParseDelivery(frame, typ == websocket.BinaryMessage)
		if err != nil {
			return err
		}
		if !ok || d.Offset <= *last {
			continue // a notice, or a message seen before the reconnect
		}
		if *last >= 0 && d.Offset > *last+1 {
			// This connection missed messages (in cluster mode, one the room's
			// new node did not list yet when they were sent): dial again from
			// the last offset seen, and the room replays them.
			return &websocket.CloseError{Code: websocket.CloseServiceRestart, Text: "missed messages"}
		}
		if err := fn(d); err != nil {
			return err
		}
		*last = d.Offset
	}
}
