// Package datadir is the runtime's data directory on disk: where every file goes, the OS lock that
// gives the directory to one runtime at a time, and the runtime index rebuilt from the objects'
// databases when it is lost. It knows objects only by their files.
//
// The layout, below the directory:
//
//	_runtime.lock                  the lock (Lock)
//	_runtime.sqlite                the runtime index (package runindex), derived from the rest
//	<namespace>/<id>.sqlite        an object's database (DBFile), with its -wal and -shm
//	<namespace>/<id>.facets/       its facets' databases, laid out the same way, nested (FacetsDir)
//	_quarantine/<namespace>/<id>-<time>/   the files of a quarantined object (Quarantine)
//
// # Persistence
//
// The objects' databases are the truth. A runtime index that is missing, empty or damaged is moved
// aside (never deleted) and rebuilt from them by OpenIndex.
package datadir
