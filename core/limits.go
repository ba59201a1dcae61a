package core

import "time"

// Limits of the runtime, in one place. Those the original runtime has take its values.
const (
	MaxNameLen    = 1024    // bytes in an object name
	MaxKeyLen     = 2048    // bytes in a KV key
	MaxValueLen   = 1 << 20 // bytes in a KV value
	MaxBatchKeys  = 128     // keys in one GetMany, PutMany or DeleteMany, as in the original
	MaxFacetPath  = 1024    // bytes in a facet's path
	MaxFacetDepth = 8       // facets nested under an object
	MaxQueryRows  = 10000   // rows of one Admin.Query

	// BlockConcurrencyTimeout is how long State.BlockConcurrencyWhile's function may run, as in
	// the original.
	BlockConcurrencyTimeout = 30 * time.Second
	// CloseTimeout bounds Runtime.Close: the time it gives running turns to end.
	CloseTimeout = 30 * time.Second
)
