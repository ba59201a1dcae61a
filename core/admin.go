package core

// Admin holds the runtime's operations, for operators and tools rather than the objects' callers:
// listing the catalog (Namespaces, Objects), reading one object (Inspect, Query), checking the
// directory (Check), copying it or one object (Backup, Export), repairing an object (Quarantine,
// Restore) and handling the alarms given up (DeadLetters, Rearm).
//
// Admin reaches an object only through its gate, like any caller: an object of a registered
// namespace is read, copied or replaced in a turn of its own, holding its gate (no other turn runs
// meanwhile; its constructor does not run). An object of a namespace this runtime has not
// registered (a tool on a directory no server holds, such as cmd/durable) is read straight from its
// file. Reads go through a connection of their own that cannot write: the file is opened read-only,
// with query_only set, and an authorizer refuses anything but reading.
//
// An Admin is safe for concurrent use; its methods fail with ErrClosed once the runtime is closed.
type Admin struct {
	rt *Runtime
}

// Admin returns the runtime's operations.
func (rt *Runtime) Admin() *Admin { return &Admin{rt: rt} }
