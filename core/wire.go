package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// What crosses the wire between nodes: a call (a method's, or a relayed HTTP request), its reply,
// and an error as its class (the sentinel it matches on the caller) and its message.

// wireCall is a call as sent between nodes.
type wireCall struct {
	ID      string    `json:"id"`
	From    string    `json:"from"`
	NS      string    `json:"ns"`
	Name    string    `json:"name"`
	Method  string    `json:"method,omitempty"`
	Arg     []byte    `json:"-"`                 // after the header (encodeCall)
	Chain   []string  `json:"chain,omitempty"`   // objects whose gates stay closed for the call
	Timeout int64     `json:"timeout,omitempty"` // what was left of the caller's deadline, in ns
	HTTP    *wireHTTP `json:"http,omitempty"`
	WS      *wireWS   `json:"ws,omitempty"` // a WebSocket's traffic between its edge and its owner
}

// A call on the wire is its header (wireCall in JSON, without the argument), a newline, and the
// argument's JSON as the method encoded it: JSON holds no raw newline, and the argument is not
// parsed twice. A reply is one byte that says what follows, and it: the result's JSON
// (replyResult), a wireErr (replyError) or a wireHTTPReply (replyHTTP) in JSON.
const (
	replyResult = 'r'
	replyError  = 'e'
	replyHTTP   = 'h'
)

// encodeCall encodes w, with its argument.
func encodeCall(w *wireCall) ([]byte, error) {
	h, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(h)+1+len(w.Arg))
	b = append(append(append(b, h...), '\n'), w.Arg...)
	return b, nil
}

// decodeCall decodes a call encodeCall encoded.
func decodeCall(b []byte) (*wireCall, error) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, errors.New("core: a call without its header's end")
	}
	w := &wireCall{}
	if err := json.Unmarshal(b[:i], w); err != nil {
		return nil, err
	}
	w.Arg = b[i+1:]
	return w, nil
}

// encodeReply encodes a reply: an error if we is set, else a relayed response if hr is, else a
// result.
func encodeReply(result []byte, hr *wireHTTPReply, we *wireErr) []byte {
	var v any
	kind := byte(replyResult)
	switch {
	case we != nil:
		kind, v = replyError, we
	case hr != nil:
		kind, v = replyHTTP, hr
	default:
		return append([]byte{replyResult}, result...)
	}
	b, _ := json.Marshal(v) // of plain fields: cannot fail
	return append([]byte{kind}, b...)
}

// decodeReply decodes a reply encodeReply encoded: one of result, hr and we.
func decodeReply(b []byte) (result []byte, hr *wireHTTPReply, we *wireErr, err error) {
	if len(b) == 0 {
		return nil, nil, nil, errors.New("core: an empty reply")
	}
	switch b[0] {
	case replyResult:
		return b[1:], nil, nil, nil
	case replyHTTP:
		hr = &wireHTTPReply{}
		err = json.Unmarshal(b[1:], hr)
		return nil, hr, nil, err
	case replyError:
		we = &wireErr{}
		err = json.Unmarshal(b[1:], we)
		return nil, nil, we, err
	}
	return nil, nil, nil, fmt.Errorf("core: a reply of unknown kind %q", b[0])
}

// wireErr is an error sent back: its class, which names the sentinel it matches on the caller, and
// its message.
type wireErr struct {
	Class  string   `json:"class"`
	Msg    string   `json:"msg"`
	Holder string   `json:"holder,omitempty"` // classMoved: the owner, "" if unknown
	Is     []string `json:"is,omitempty"`     // classRemote: the classes of the sentinels the object's error wraps
	Own    []string `json:"own,omitempty"`    // classRemote: the namespace's error classes it matches (errclass.go)
}

// The classes of errors that cross nodes.
const (
	classMoved        = "moved"
	classFenced       = "fenced"
	classClosed       = "closed"
	classRemote       = "remote"
	classOther        = "other"
	classCanceled     = "canceled"
	classDeadline     = "deadline"
	classOverloaded   = "overloaded"
	classLeaseUnprov  = "lease_unproven"
	classCommitUnkn   = "commit_unknown"
	classCommitFailed = "commit_failed"
)

// classes are the sentinels that keep their identity across nodes, by class, in the order an
// error is matched against them.
var classes = []struct {
	class string
	err   error
}{
	{classFenced, ErrFenced}, {classCommitUnkn, ErrCommitUnknown}, {classCommitFailed, ErrCommitFailed},
	{classLeaseUnprov, ErrLeaseUnproven}, {classOverloaded, ErrOverloaded}, {classClosed, ErrClosed},
	{"deadlock", ErrDeadlock}, {"invalid_name", ErrInvalidName}, {"invalid_argument", ErrInvalidArgument},
	{"too_large", ErrTooLarge}, {"no_method", ErrNoMethod}, {"reset", ErrObjectReset}, {"damaged", ErrDamaged},
	{"schema_too_new", ErrSchemaTooNew}, {"unreachable", ErrUnreachable},
	{classCanceled, context.Canceled}, {classDeadline, context.DeadlineExceeded},
}

// sentinel returns the sentinel of class; nil for classOther.
func sentinel(class string) error {
	for _, c := range classes {
		if c.class == class {
			return c.err
		}
	}
	return nil
}

// ran reports whether the call may have run: not refused before its turn began.
func (e *wireErr) ran() bool {
	switch e.Class {
	case classMoved, classOverloaded, classLeaseUnprov, classFenced, classClosed, "no_method", "invalid_name", "deadlock":
		return false
	}
	return true
}

// encodeErr gives err its class: the runtime's sentinels by name, the object's own errors as remote.
func encodeErr(err error) *wireErr {
	msg := err.Error()
	var ce *Error
	if errors.As(err, &ce) {
		msg = ce.Err.Error()
	}
	var noe *NotOwnerError
	if errors.As(err, &noe) {
		return &wireErr{Class: classMoved, Msg: msg, Holder: noe.Holder}
	}
	var re *RemoteError
	if errors.As(err, &re) {
		we := &wireErr{Class: classRemote, Msg: re.Error()}
		for _, c := range classes { // errors.Is holds through the object's error, as it does on one node
			if errors.Is(re.Err, c.err) {
				we.Is = append(we.Is, c.class)
			}
		}
		return we
	}
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return &wireErr{Class: c.class, Msg: msg}
		}
	}
	return &wireErr{Class: classOther, Msg: msg}
}

// decode makes the caller's error of e, from node.
func (e *wireErr) decode(rc *routedCall, node string) error {
	switch e.Class {
	case classMoved:
		return rc.err(&NotOwnerError{Key: rc.ns.name + "/" + rc.name, Holder: e.Holder})
	case classRemote:
		ne := &nodeError{msg: e.Msg, node: node}
		for _, c := range e.Is {
			if s := sentinel(c); s != nil {
				ne.is = append(ne.is, s)
			}
		}
		ne.is = append(ne.is, rc.ns.ownSentinels(e.Own)...)
		return rc.err(&RemoteError{Err: ne})
	}
	ne := &nodeError{msg: e.Msg, node: node}
	if s := sentinel(e.Class); s != nil {
		ne.is = []error{s}
	}
	return rc.err(ne)
}

// nodeError is an error that another node returned: its message, and the sentinels it matches.
type nodeError struct {
	msg, node string
	is        []error
}

func (e *nodeError) Error() string   { return fmt.Sprintf("%s (at node %q)", e.msg, e.node) }
func (e *nodeError) Unwrap() []error { return e.is }
