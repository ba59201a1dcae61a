// Package limiter is the sliding-window rate limiter: one object per key
// (a user, an IP address, an API token) that remembers when it let calls
// through during the last window. The invariant: within any window, one
// key never has more than limit calls allowed, however many callers check
// it at once, and a restart does not reset the count (SEMANTICS L1).
//
// A Limiter keeps one row per allowed call in its object's own SQLite
// database, and decides with three statements, all in one turn: forget the
// calls that left the window, count the rest, and record this call if the
// count is under the limit. Register a namespace of them and ask the key's
// object with core.Call:
//
//	keys, err := core.Register(rt, "ratelimit", limiter.New)
//	...
//	key, err := keys.Get("user-7")
//	...
//	d, err := core.Call(ctx, key, func(ctx context.Context, l *limiter.Limiter) (limiter.Decision, error) {
//		return l.Allow(ctx, 5, time.Minute)
//	})
//
// HTTP does this for every request, keyed by client address, and answers
// 429 Too Many Requests with Retry-After when the key is over its limit.
//
// # Cost
//
// Each check is one turn of the key's object. An allowed call writes a row
// and is deleted by a later check once it has left the window: two rows
// written per allowed call, billing units on the original runtime
// (SEMANTICS L2). A refused call writes nothing beyond the expired rows it
// deletes.
//
// # Pitfalls
//
//   - One hot key (a shared office IP, a busy API token) sends all its
//     checks to one object, which handles them one at a time and can reach
//     its throughput ceiling (SEMANTICS L2, C5); the middleware then
//     answers 503. Key by something finer, or put a cheap in-memory limiter
//     in front.
//   - The window holds up to limit rows and each check scans them, so the
//     cost of a check grows with the limit. For limits in the thousands,
//     keep a counter per fixed window, or a token bucket, in one row.
//   - Behind a proxy, RemoteAddr is the proxy's address and every client
//     shares one key. Set HTTP.TrustedProxyHeader, but only when every
//     request comes through that proxy: a client can send any header it
//     likes. The last address in the header is used, the one the proxy
//     added; the earlier ones were written by the client.
//   - IPv6 clients usually hold a whole /64; the default key is that
//     prefix, not the address, or a client could pick a fresh address for
//     every request.
//   - Time comes from Go, never from SQL: Allow and HTTP take it from the
//     runtime's clock (core.State.Now, which is core.Options.Now), AllowAt
//     from its argument. A clock that steps backwards keeps calls in the
//     window longer, never shorter.
//   - Pass the same limit and window on every call for a key: they are
//     arguments, not stored, so a key whose limit shrinks may see a ResetAt
//     earlier than its next allowed call.
//   - The middleware fails closed: when the runtime cannot answer
//     (overload, shutdown) the request gets 503, not a free pass.
//
// # When not to use it
//
// When an approximate limit will do, to blunt obvious abuse, an in-memory
// token bucket per process (golang.org/x/time/rate) is far cheaper: no
// turn, no commit, no rows. Use an object per key when the limit must be
// exact for that key, shared by every caller that reaches the runtime, and
// kept across restarts; and when the keys are too many to keep in memory,
// since idle objects are evicted to disk.
//
// # From any node
//
// Define makes a key's Allow a method callable on any node of a cluster (core.Define): at a node
// that does not own the key it runs at the one that does, so a key has one window across machines;
// errors.Is(err, ErrInvalidLimit) holds there too.
package limiter
