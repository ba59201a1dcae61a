package sqlstore

import (
	"reflect"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// noCheckpointOnClose sets SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE on the driver's connection and reports
// whether it could; a driver without the handle (see handle) keeps SQLite's checkpoint at close.
func noCheckpointOnClose(dc any) bool {
	var rc int32 = sqlite3.SQLITE_ERROR
	handle(dc, func(t *libc.TLS, h uintptr) {
		rc = dbConfig(t, h, sqlite3.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, int32(1), uintptr(0))
	})
	return rc == sqlite3.SQLITE_OK
}

// handle calls fn with the SQLite handle of the driver's connection and the connection's thread
// state, and reports whether it could. The driver has no method for them: they are read from its
// fields by name, and a driver without them is left alone.
func handle(dc any, fn func(t *libc.TLS, h uintptr)) bool {
	v := reflect.ValueOf(dc)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	db, tls := v.Elem().FieldByName("db"), v.Elem().FieldByName("tls")
	if !db.IsValid() || db.Kind() != reflect.Uintptr || !tls.IsValid() || tls.Type() != reflect.TypeFor[*libc.TLS]() {
		return false
	}
	t := (*libc.TLS)(unsafe.Pointer(tls.Pointer()))
	h := uintptr(db.Uint())
	if t == nil || h == 0 {
		return false
	}
	fn(t, h)
	return true
}

// dbConfig calls sqlite3_db_config(h, op, args...).
func dbConfig(t *libc.TLS, h uintptr, op int32, args ...any) int32 {
	va := t.Alloc(8 * len(args))
	defer t.Free(8 * len(args))
	return sqlite3.Xsqlite3_db_config(t, h, op, libc.VaList(va, args...))
}
