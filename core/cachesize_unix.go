//go:build unix

package core

import "syscall"

// raiseFDLimit raises the process's soft descriptor limit (RLIMIT_NOFILE) to its hard limit, if it
// is lower and the system allows it, and returns the soft limit in force and whether it raised it.
func raiseFDLimit() (uint64, bool) {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return 0, false
	}
	if r.Cur >= r.Max {
		return r.Cur, false
	}
	raised := r
	raised.Cur = r.Max
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) != nil {
		return r.Cur, false
	}
	return r.Max, true
}
