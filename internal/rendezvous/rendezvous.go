// Package rendezvous places shards on nodes by rendezvous (highest random weight) hashing: each
// node has a weight for each shard, and a shard goes to the node of highest weight among those
// eligible, so that removing a node moves only its shards, spread evenly over the others.
package rendezvous

import (
	"encoding/binary"
	"hash/fnv"
)

// Score is node's weight for shard.
func Score(node string, shard int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	var b [9]byte
	binary.BigEndian.PutUint64(b[1:], uint64(shard))
	h.Write(b[:])
	// FNV alone leaves names that differ in one byte ordered alike for most shards: mix it.
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// Place returns the node among nodes of highest weight for shard (of two of equal weight, the
// first by name); "" if nodes is empty.
func Place(shard int, nodes []string) string {
	best, bestScore := "", uint64(0)
	for _, name := range nodes {
		if s := Score(name, shard); best == "" || s > bestScore || s == bestScore && name < best {
			best, bestScore = name, s
		}
	}
	return best
}
