package room_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/room"
	"github.com/gorilla/websocket"
)

// Two members join a room; one says hello; both receive it with its
// offset and the sender's attachment.
func Example() {
	rt, err := core.Open(core.Options{})
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	rooms, err := room.Register(rt, "rooms", room.Options{})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(room.Handler(rooms))
	defer srv.Close()
	base := "ws" + strings.TrimPrefix(srv.URL, "http") + "/room/lobby?name="

	var members []*websocket.Conn
	for _, name := range []string{"ann", "bob"} {
		c, _, err := websocket.DefaultDialer.Dial(base+name, nil)
		if err != nil {
			panic(err)
		}
		defer c.Close()
		_, notice, _ := c.ReadMessage() // "!live 0": what follows is live
		fmt.Printf("%s joined: %s\n", name, notice)
		members = append(members, c)
	}
	members[0].WriteMessage(websocket.TextMessage, []byte("hello"))
	for i, c := range members {
		_, frame, _ := c.ReadMessage()
		d, _, _ := room.ParseDelivery(frame, false)
		var from room.Member
		json.Unmarshal(d.From, &from)
		fmt.Printf("member %d got #%d from %s: %s\n", i, d.Offset, from.Name, d.Data)
	}
	// Output:
	// ann joined: !live 0
	// bob joined: !live 0
	// member 0 got #1 from ann: hello
	// member 1 got #1 from ann: hello
}
