package main

import "syscall"

// nodeProcAttr puts a node process of the cluster command in a process
// group of its own, so that Ctrl-C reaches the command alone, which stops
// its nodes in order; and has the kernel kill the node if the command dies.
func nodeProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
