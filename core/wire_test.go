package core

import (
	"net/http"
	"reflect"
	"testing"
)

// A call crosses the wire whole: every field, the argument's bytes as they were, a relayed request.
func TestWire_CallRoundTrip(t *testing.T) {
	for _, w := range []*wireCall{
		{ID: "0a1b", From: "n2", NS: "counters", Name: "o/1", Method: "add", Arg: []byte(`{"n":1}`)},
		{ID: "x", From: "n1", NS: "kv", Name: "", Method: "get", Arg: []byte{}, Chain: []string{"a/b", "c/d"}, Timeout: 1 << 40},
		{ID: "y", From: "n3", NS: "kv", Name: "héllo\n", Arg: []byte{},
			HTTP: &wireHTTP{Method: "POST", URL: "/x?y=1", Header: http.Header{"A": {"b"}}, Body: []byte("body\n")}},
	} {
		b, err := encodeCall(w)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeCall(b)
		if err != nil {
			t.Fatalf("decodeCall(encodeCall(%+v)): %v", w, err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("decodeCall(encodeCall(%+v)) = %+v", w, got)
		}
	}
}

// Bytes that are not a call, or a call cut short, are an error, never a panic or a call that
// reads past its end.
func TestWire_CallBadInput(t *testing.T) {
	b, err := encodeCall(&wireCall{ID: "id", From: "n1", NS: "kv", Name: "o", Method: "m", Chain: []string{"kv/p"}, Timeout: 5,
		HTTP: &wireHTTP{Method: "GET", URL: "/"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(b) - 1 { // every cut before the relayed request's last byte
		if w, err := decodeCall(b[:i]); err == nil {
			t.Errorf("a call cut at %d of %d bytes decoded: %+v", i, len(b), w)
		}
	}
	for _, bad := range [][]byte{nil, {}, {0}, {2, 0}, []byte("{\"id\":\"x\"}\n{}"), {callVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		{callVersion, 0, 0, 0, 0, 0, 0x7f}} {
		if w, err := decodeCall(bad); err == nil {
			t.Errorf("decodeCall(%q) = %+v; want an error", bad, w)
		}
	}
}

func FuzzDecodeCall(f *testing.F) {
	b, _ := encodeCall(&wireCall{ID: "id", From: "n1", NS: "kv", Name: "o", Method: "m", Chain: []string{"kv/p"}, Timeout: 5, Arg: []byte("{}")})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := decodeCall(b)
		if err != nil {
			return
		}
		again, err := encodeCall(w)
		if err != nil {
			t.Fatal(err)
		}
		if w2, err := decodeCall(again); err != nil || !reflect.DeepEqual(w, w2) {
			t.Fatalf("a decoded call does not survive a second round: %+v, %+v, %v", w, w2, err)
		}
	})
}
