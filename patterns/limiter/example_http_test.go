package limiter_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/durable-go/durable/core"
	"github.com/durable-go/durable/patterns/limiter"
)

func hello(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintln(w, "hello")
}

// Three requests a minute per client address; the fourth is refused.
func ExampleHTTP_Middleware() {
	rt, err := core.Open(core.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	keys, err := core.Register(rt, "ratelimit", limiter.New)
	if err != nil {
		log.Fatal(err)
	}
	limit := &limiter.HTTP{Limiters: keys, Limit: 3, Window: time.Minute}
	handler := limit.Middleware(http.HandlerFunc(hello))
	// In a server: http.ListenAndServe(addr, handler)

	for range 4 {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		h := w.Header()
		fmt.Printf("%d remaining=%s reset=%s retry-after=%q\n",
			w.Code, h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset"), h.Get("Retry-After"))
	}
	// Output:
	// 200 remaining=2 reset=60 retry-after=""
	// 200 remaining=1 reset=60 retry-after=""
	// 200 remaining=0 reset=60 retry-after=""
	// 429 remaining=0 reset=60 retry-after="60"
}
