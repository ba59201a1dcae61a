// Package replogtest is for testing cluster mode and the engines under it: MemCluster, an
// in-memory engine whose nodes can be cut off or made to lose acknowledgements, and the contract
// suites LogContract and LeasesContract, which check that an engine keeps the promises of
// replog.Log and replog.Leases.
package replogtest
