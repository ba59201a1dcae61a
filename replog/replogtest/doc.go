// Package replogtest is for testing cluster mode and the engines under it: MemCluster, an
// in-memory engine whose nodes can be cut off (CutLog, CutLeases, CutBeacon, CutCalls) or made to
// lose acknowledgements and replies (LoseAcks, LoseReplies), and the contract suites LogContract,
// LeasesContract, BeaconContract and CallsContract, which check that an engine keeps the promises
// of replog.Log, replog.Leases, replog.Beacon and replog.Calls.
package replogtest
