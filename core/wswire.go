package core

import (
	"encoding/json"
	"errors"

	"github.com/gorilla/websocket"

	"github.com/durable-go/durable/core/internal/wsconn"
)

// What a WebSocket's traffic between its edge and its owner carries (wsrelay.go), in a wireCall.

// wireWS is a WebSocket's traffic in a call.
type wireWS struct {
	Op     string     `json:"op"`               // "in", "out" or "adopt"
	Sock   string     `json:"sock,omitempty"`   // in: the connection
	Record *wireSock  `json:"record,omitempty"` // in: register the connection with this owner
	Frames []wireItem `json:"frames,omitempty"` // in: messages read, in order
	Seq    uint64     `json:"seq,omitempty"`    // in: the number of Frames[0]; the connection's messages are numbered from 1
	Resent bool       `json:"resent,omitempty"` // in: an owner lost before it answered may have delivered some of Frames
	End    *wireEnd   `json:"end,omitempty"`    // in: how the connection ended (after Frames)
	Items  []wireItem `json:"items,omitempty"`  // out: for the edge's connections, in order

	// adopt: the handles of an object's connections, handed off to its next owner (wshandoff.go)
	Adopt []wireAdopt `json:"adopt,omitempty"`
}

// wireSock is a connection's record: what an owner needs to list it.
type wireSock struct {
	Tags   []string        `json:"tags,omitempty"`
	Attach json.RawMessage `json:"attach,omitempty"`
}

// wireItem is one message, or (out) a close or an attachment.
type wireItem struct {
	Sock      string          `json:"sock,omitempty"`
	More      []string        `json:"more,omitempty"` // out: other connections the same message is for
	Data      []byte          `json:"data,omitempty"`
	Binary    bool            `json:"bin,omitempty"`
	Close     *wsconn.End     `json:"close,omitempty"`
	Attach    json.RawMessage `json:"attach,omitempty"`
	SetAttach bool            `json:"set,omitempty"`
}

// wireEnd is a wsconn.Ending.
type wireEnd struct {
	Peer   bool   `json:"peer,omitempty"`
	Code   int    `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	Err    string `json:"err,omitempty"`  // the error's message
	Kind   string `json:"kind,omitempty"` // which error: limit, slow, text, or other
}

func encodeEnd(e wsconn.Ending) *wireEnd {
	w := &wireEnd{Peer: e.Peer, Code: e.Code, Reason: e.Reason}
	if e.Err != nil {
		w.Err, w.Kind = e.Err.Error(), "other"
		switch {
		case errors.Is(e.Err, websocket.ErrReadLimit):
			w.Kind = "limit"
		case errors.Is(e.Err, ErrSlowClient):
			w.Kind = "slow"
		case errors.Is(e.Err, ErrInvalidText):
			w.Kind = "text"
		}
	}
	return w
}

func (w *wireEnd) ending() wsconn.Ending {
	e := wsconn.Ending{Peer: w.Peer, Code: w.Code, Reason: w.Reason}
	switch w.Kind {
	case "":
	case "limit":
		e.Err = websocket.ErrReadLimit
	case "slow":
		e.Err = ErrSlowClient
	case "text":
		e.Err = ErrInvalidText
	default:
		e.Err = errors.New(w.Err)
	}
	return e
}

// replyUnknown is an owner's answer to "in" for a connection it does not list, sent without its
// record: the edge sends it again with it.
var replyUnknown = []byte(`"unknown"`)
