//go:build !unix

package core

// raiseFDLimit: the descriptor limit is unknown here.
func raiseFDLimit() (uint64, bool) { return 0, false }
