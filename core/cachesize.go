package core

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The default MaxOpenObjects is sized by the machine: each open object holds descriptors (its
// database and its WAL; the WAL's index is in the connection's memory, sqlstore.Open) and memory,
// so the bound is the smaller of what the descriptor limit and a share of memory allow. An idle
// object's database holds about 100 KB (bench's BenchmarkResident: the connection, its thread
// state, its schema and the 32 KiB WAL index; its page cache, statements and lookaside are given
// back a second after its last call);
// one called within the last second holds its page cache besides, up to 64 pages of about 8 KiB
// (a 4 KiB page and its header in the allocator's 8 KiB slot). memPerObject keeps the share when
// up to half the open objects have a full page cache.
const (
	fdsPerObject     = 2         // the database and its -wal
	memPerObject     = 384 << 10 // bytes: 100 KB idle, and half of a full page cache (512 KiB)
	memShare         = 8         // open objects may use one eighth of the machine's memory
	minMaxOpen       = 64        // never fewer, however small the machine
	maxMaxOpen       = 1 << 20   // never more
	fallbackMaxOpen  = 1024      // when neither limit can be read
	reservedFDsShare = 8         // one eighth of the descriptors (at least minReservedFDs) stays
	minReservedFDs   = 128       // for the rest of the process: sockets, WebSockets, files
)

// cacheSize is what the runtime chose for MaxOpenObjects, and from what.
type cacheSize struct {
	max      int
	by       string // "option", "descriptors", "memory" or "default"
	fdLimit  uint64 // the soft descriptor limit, after raising it (0: unknown)
	fdRaised bool   // Open raised the soft limit to the hard one
	memory   uint64 // bytes of memory the bound was computed from (0: unknown)
}

// String says what was chosen, for the log and the workshop's banner.
func (c cacheSize) String() string {
	s := fmt.Sprintf("%d open objects", c.max)
	switch c.by {
	case "option":
		return s + " (Options.MaxOpenObjects)"
	case "default":
		return s + " (the fixed default: the descriptor limit and memory are unknown)"
	}
	s += fmt.Sprintf(" (by %s: descriptor limit %d", c.by, c.fdLimit)
	if c.fdRaised {
		s += ", raised from the soft limit to the hard one"
	}
	if c.memory > 0 {
		s += fmt.Sprintf(", memory %d MiB", c.memory>>20)
	}
	return s + ")"
}

// sizeCache computes the default MaxOpenObjects when opts leave it 0. It may raise the process's
// soft descriptor limit to its hard limit (raiseFDLimit).
func sizeCache(set int) cacheSize {
	if set > 0 {
		return cacheSize{max: set, by: "option"}
	}
	c := cacheSize{by: "default", max: fallbackMaxOpen}
	c.fdLimit, c.fdRaised = raiseFDLimit()
	c.memory = machineMemory()
	byFD, byMem := maxMaxOpen, maxMaxOpen
	if c.fdLimit > 0 {
		reserve := max(c.fdLimit/reservedFDsShare, minReservedFDs)
		byFD = int(min(uint64(maxMaxOpen), (max(c.fdLimit, reserve)-reserve)/fdsPerObject))
		c.by = "descriptors"
	}
	if c.memory > 0 {
		byMem = int(min(uint64(maxMaxOpen), c.memory/memShare/memPerObject))
		if byMem < byFD || c.by == "default" {
			c.by = "memory"
		}
	}
	if c.by != "default" {
		c.max = max(min(byFD, byMem), minMaxOpen)
	}
	return c
}

// machineMemory is the memory the process may use: the machine's (MemTotal), or its cgroup's
// limit if lower; 0 if unknown.
func machineMemory() uint64 {
	var total uint64
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseUint(f[1], 10, 64); err == nil {
					total = kb << 10
				}
			}
		}
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(p); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
				total = n
			}
		}
	}
	return total
}
