package core

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Options configure a Runtime. The zero value is ready to use: a private temporary directory,
// durable commits, the original runtime's idle time.
type Options struct {
	// Dir is the data directory: a subdirectory per namespace, an SQLite file per object. "" means
	// a private temporary directory that Close removes.
	Dir string

	// IdleTimeout is how long an object with nothing to do stays in memory before it is evicted
	// (default 10 s). After a second with nothing to do (half IdleTimeout if that is shorter), its
	// database stays open but gives back SQLite's page cache, its prepared statements and its
	// lookaside memory; its next call takes them again (Stats.QuietDBs counts such databases).
	// After half IdleTimeout (5 s by default), its database is parked: the connection
	// closes, and one file descriptor keeps the file locked; its next call opens the connection
	// again (Stats.ParkedDBs; SEMANTICS O11; Linux, not in cluster mode).
	IdleTimeout time.Duration

	// MaxQueue bounds the calls waiting for one object (default 1024); a call to a full queue fails
	// at once with ErrOverloaded.
	MaxQueue int

	// MaxOpenObjects bounds the objects in memory with an open database; past it the least
	// recently used idle ones are evicted early. Default (0): sized by the machine, the smaller of
	// what the descriptor limit allows (2 descriptors per object, its database and its log, an
	// eighth of the limit kept for the rest of the process) and an eighth of memory at 384 KiB per
	// object, at least 64; for that, Open raises the process's soft descriptor limit
	// (RLIMIT_NOFILE) to its hard limit if it is lower. Stats().MaxOpenObjects says what was
	// chosen, and Open logs it (event max_open_objects, at Info).
	MaxOpenObjects int

	// MaxBatch bounds the turns that share one group commit (default 1024).
	MaxBatch int

	// Synchronous is SQLite's synchronous setting for object databases: "FULL" (a commit survives
	// power loss; the default of the single-process runtime) or "NORMAL" (it survives a crash of
	// the process, perhaps not of the machine; the default in cluster mode). In cluster mode
	// (Replication) NORMAL loses no acknowledged commit: a commit is acknowledged only once the
	// log holds it, and a local file that lost its last commits is caught up from the log (SEMANTICS
	// CL6), so the local fsync of each commit buys nothing there.
	Synchronous string

	// Logger receives the runtime's structured records: what it decides on its own (evictions at
	// Debug; alarm retries, dead letters, damaged databases, the index rebuilt, deadlocks refused,
	// slow WebSocket clients cut), each with the object's namespace and name. Nil: slog.Default(),
	// so that a dead letter or a damaged database is never silent; slog.New(slog.DiscardHandler)
	// turns the records off.
	Logger *slog.Logger

	// Meter receives the runtime's metrics (calls, queue, gate wait, turn and commit times, rows,
	// alarms, objects, WebSockets; see the package doc), per namespace. Nil: none, at no cost.
	Meter metric.MeterProvider

	// Tracer receives a span per call, with its queue wait, segments, Awaits and commit wait as
	// children, and spans for alarm runs and WebSocket deliveries. Nil: none, at no cost.
	Tracer trace.TracerProvider

	// AlarmRetry says when a failed alarm runs again (default: the original runtime's 2 s doubling,
	// 6 retries, up to 25% jitter).
	AlarmRetry RetryPolicy

	// AlarmTimeout is the wall-time limit of one alarm run (default 15 min): the run's context is
	// cancelled then, and a run that overstays fails.
	AlarmTimeout time.Duration

	// AlarmConcurrency bounds the alarms running at once (default 64).
	AlarmConcurrency int

	// Now is the runtime's one clock (default time.Now): alarms and schedules are due by it, idle
	// eviction measures by it, objects read it with State.Now. Tests may shift it; waiting timers
	// notice a shift at the runtime's next event (a commit that changes a timer, an idle check
	// while objects are resident), not by a periodic wake-up.
	Now func() time.Time

	// OnAlarmDropped is called once an alarm that ran out of retries is in the dead-letter table
	// (default: an ERROR record, event=alarm_dropped). A panic in it is recovered and logged.
	OnAlarmDropped func(DeadLetter)

	// WebSocketSendQueue bounds the messages waiting for one WebSocket (default 256); a client
	// further behind is cut off with 1013.
	WebSocketSendQueue int

	// WebSocketMaxMessage is the largest message accepted from a WebSocket client (default 1 MiB);
	// a larger one closes it with 1009.
	WebSocketMaxMessage int64

	// WebSocketOrigins lists the browser origins ("https://app.example.com", or "*") allowed to
	// open WebSockets besides the request's own host. Requests without an Origin header (not from a
	// browser) are allowed.
	WebSocketOrigins []string

	// Replication makes the runtime one node of a cluster (see Replication): every object's commits
	// are shipped to a replicated log before their output is released, and an object is served by
	// the one node holding its lease. Nil: the single-process runtime.
	Replication *Replication
}

func (o *Options) withDefaults() error {
	orDefault(&o.IdleTimeout, 10*time.Second)
	orDefault(&o.MaxQueue, 1024)
	orDefault(&o.MaxBatch, 1024)
	orDefault(&o.AlarmTimeout, 15*time.Minute)
	orDefault(&o.AlarmConcurrency, 64)
	orDefault(&o.WebSocketSendQueue, 256)
	orDefault(&o.WebSocketMaxMessage, 1<<20)
	switch {
	case o.Synchronous == "" && o.Replication != nil:
		o.Synchronous = "NORMAL" // the log is what makes a commit durable (CL6)
	case o.Synchronous == "":
		o.Synchronous = "FULL"
	case o.Synchronous != "FULL" && o.Synchronous != "NORMAL":
		return fmt.Errorf("core: Options.Synchronous must be FULL or NORMAL, not %q", o.Synchronous)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.AlarmRetry = o.AlarmRetry.withDefaults()
	return nil
}

func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
