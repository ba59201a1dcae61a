package core

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// What crosses the wire between nodes: a call (a method's, or a relayed HTTP request), its reply,
// and an error as its class (the sentinel it matches on the caller) and its message.

// wireCall is a call as sent between nodes.
type wireCall struct {
	ID      string
	From    string
	NS      string
	Name    string
	Method  string
	Arg     []byte    // the argument's JSON, as the method encoded it
	Chain   []string  // objects whose gates stay closed for the call
	Timeout int64     // what was left of the caller's deadline, in ns; 0 for none
	HTTP    *wireHTTP // a relayed HTTP request instead of a method, in JSON on the wire
	WS      *wireWS   // a WebSocket's traffic between its edge and its owner, in JSON on the wire
}

// A call on the wire is a version byte, its fields in binary (each string its length as a uvarint
// and its bytes; the chain its length and its strings; the timeout a uvarint; the relayed request's
// JSON and the WebSocket traffic's JSON as strings, empty for none), then the argument's JSON as the method encoded it, to the end:
// the argument is not copied or parsed twice, and the header costs no JSON. A reply is one byte
// that says what follows, and it: the result's JSON (replyResult), a wireErr (replyError) or a
// wireHTTPReply (replyHTTP) in JSON.
const (
	callVersion = 1
	replyResult = 'r'
	replyError  = 'e'
	replyHTTP   = 'h'
)

// encodeCall encodes w, with its argument.
func encodeCall(w *wireCall) ([]byte, error) {
	var h, ws []byte
	var err error
	if w.HTTP != nil {
		if h, err = json.Marshal(w.HTTP); err != nil {
			return nil, err
		}
	}
	if w.WS != nil {
		if ws, err = json.Marshal(w.WS); err != nil {
			return nil, err
		}
	}
	n := 1 + 8*binary.MaxVarintLen64 + len(w.ID) + len(w.From) + len(w.NS) + len(w.Name) + len(w.Method) + len(h) + len(ws) + len(w.Arg)
	for _, c := range w.Chain {
		n += binary.MaxVarintLen64 + len(c)
	}
	b := make([]byte, 0, n+binary.MaxVarintLen64)
	b = append(b, callVersion)
	for _, f := range [...]string{w.ID, w.From, w.NS, w.Name, w.Method} {
		b = appendString(b, f)
	}
	b = binary.AppendUvarint(b, uint64(len(w.Chain)))
	for _, c := range w.Chain {
		b = appendString(b, c)
	}
	b = binary.AppendUvarint(b, uint64(max(w.Timeout, 0)))
	b = binary.AppendUvarint(b, uint64(len(h)))
	b = append(b, h...)
	b = binary.AppendUvarint(b, uint64(len(ws)))
	b = append(b, ws...)
	return append(b, w.Arg...), nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeCall decodes a call encodeCall encoded; bytes that are not one are an error.
func decodeCall(b []byte) (*wireCall, error) {
	if len(b) == 0 || b[0] != callVersion {
		return nil, errors.New("core: a call of an unknown version")
	}
	r := wireReader{b: b[1:]}
	w := &wireCall{ID: r.string(), From: r.string(), NS: r.string(), Name: r.string(), Method: r.string()}
	if n := r.uvarint(); n > 0 && r.err == nil {
		if n > uint64(len(r.b)) { // each string takes a byte at least
			return nil, errors.New("core: a call with a chain longer than itself")
		}
		w.Chain = make([]string, 0, n)
		for range n {
			w.Chain = append(w.Chain, r.string())
		}
	}
	t := r.uvarint()
	if t > math.MaxInt64 {
		r.fail()
	}
	w.Timeout = int64(t)
	h, ws := r.bytes(), r.bytes()
	if r.err != nil {
		return nil, r.err
	}
	if len(h) > 0 {
		w.HTTP = &wireHTTP{}
		if err := json.Unmarshal(h, w.HTTP); err != nil {
			return nil, fmt.Errorf("core: a call's relayed request: %w", err)
		}
	}
	if len(ws) > 0 {
		w.WS = &wireWS{}
		if err := json.Unmarshal(ws, w.WS); err != nil {
			return nil, fmt.Errorf("core: a call's WebSocket traffic: %w", err)
		}
	}
	w.Arg = r.b
	return w, nil
}

// wireReader reads a call's fields; its first error sticks, and every read after it returns zero.
type wireReader struct {
	b   []byte
	err error
}

func (r *wireReader) fail() { r.err, r.b = errors.New("core: a call cut short or malformed"), nil }

func (r *wireReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wireReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *wireReader) string() string { return string(r.bytes()) }

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
	Wait   int64    `json:"wait,omitempty"`   // classMoved naming the answering node: ns until its lease from before a restart may be taken over
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
