//go:build !linux

package main

import "syscall"

// nodeProcAttr is the default elsewhere: Ctrl-C in a terminal reaches the
// nodes as well as the command, and each stops on its own.
func nodeProcAttr() *syscall.SysProcAttr { return nil }
