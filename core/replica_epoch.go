package core

// RecordEpoch returns the writer's epoch that a record of an object's log carries (a commit, the
// epoch opened by a node taking the object over, or a snapshot), after checking the record's
// checksum; a record the runtime did not write, or a damaged one, is an error. Epochs never
// decrease along an object's log, so a tool that reads the log through the engine (Log.Read) can
// check that no former owner appended after a takeover.
func RecordEpoch(rec []byte) (uint64, error) {
	r, err := decodeRecord(rec)
	if err != nil {
		return 0, err
	}
	return r.epoch, nil
}
