package faults

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Outcome is what a client saw of an operation.
type Outcome int

const (
	// OK: the write was acknowledged, or the read returned.
	OK Outcome = iota
	// Conflict: the write was refused because the key's last record was not the one expected.
	Conflict
	// Unknown: the write may or may not have happened (a timeout, a lost connection, any error
	// but a conflict). A read that failed is not recorded.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Conflict:
		return "conflict"
	default:
		return "unknown"
	}
}

// Op is one operation of a key's history, as a client invoked it and saw it end.
type Op struct {
	Client int
	Node   int  // the node it was sent to
	Write  bool // a write (Expect, Value) or a read of the key's last record
	Expect uint64
	Value  string // a write's value, unique in the run; a read's result
	Seq    uint64 // the sequence a write got, or a read returned
	Out    Outcome
	Call   time.Duration // since the start of the run
	Return time.Duration
	Err    string `json:",omitempty"` // a write's error, for the record
}

// Record is one of a key's records as read at the end.
type Record struct {
	Seq   uint64
	Value string
	// Epoch is the writer's epoch the record carries, or 0 if the target's records carry none.
	Epoch uint64
}

// Verdict is what the checkers found in one key's history.
type Verdict struct {
	Key          string
	Writes       int // writes invoked
	Acked        int // acknowledged writes, each checked against the final records
	Lost         int // acknowledged writes missing from the final records (or at another place)
	Phantoms     int // final records no write made, or made expecting another predecessor
	EpochDrops   int // records whose epoch is lower than the one before
	Unknown      int // writes with an unknown outcome
	UnknownFound int // of those, how many are in the final records (they happened)
	Reads        int
	Porcupine    porcupine.CheckResult
	Problems     []string // the first few problems, described
	info         porcupine.LinearizationInfo
}

// OK reports whether the key's history passed every checker. A porcupine timeout (Unknown) is
// not a pass.
func (v *Verdict) OK() bool {
	return v.Lost == 0 && v.Phantoms == 0 && v.EpochDrops == 0 && v.Porcupine == porcupine.Ok
}

func (v *Verdict) problem(format string, args ...any) {
	if len(v.Problems) < 10 {
		v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
	}
}

// regState is the model's state of one key: its last record.
type regState struct {
	seq   uint64
	value string
}

type regInput struct {
	write  bool
	expect uint64
	value  string
}

type regOutput struct {
	out   Outcome
	seq   uint64
	value string // a read's
}

// Model is the porcupine model of one key of a log with expected-sequence appends: a write that
// expects the key's last sequence succeeds with a later sequence, a write that expects another is
// refused, a read returns the last record. A write whose outcome is unknown is given the sequence
// its value has in the final records and left open; one whose value is not there never happened
// and is left out.
var Model = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(regState), input.(regInput), output.(regOutput)
		if !in.write {
			return out.seq == st.seq && out.value == st.value, st
		}
		switch out.out {
		case Conflict:
			return in.expect != st.seq, st
		default: // OK, or Unknown found in the final records
			if in.expect != st.seq || out.seq <= st.seq {
				return false, st
			}
			return true, regState{out.seq, in.value}
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if !in.write {
			return fmt.Sprintf("last() -> %d %q", out.seq, out.value)
		}
		if out.out == Conflict {
			return fmt.Sprintf("append(%q after %d) -> conflict", in.value, in.expect)
		}
		return fmt.Sprintf("append(%q after %d) -> %s %d", in.value, in.expect, out.out, out.seq)
	},
	DescribeState: func(state any) string {
		st := state.(regState)
		return fmt.Sprintf("%d %q", st.seq, st.value)
	},
}

// Check runs the checkers over one key's history and its records read at the end (after every
// fault was healed):
//   - every acknowledged write is in the final records, at the sequence it was acknowledged with;
//   - every final record was written by a write that expected the record before it (so the log
//     has no record nobody wrote, and lost none between two that are there);
//   - epochs never decrease along the records (where records carry them);
//   - the history is linearizable (porcupine), unknown outcomes left open.
func Check(key string, ops []Op, final []Record, timeout time.Duration) *Verdict {
	v := &Verdict{Key: key}
	at := make(map[string]int, len(final)) // value -> index in final
	for i, r := range final {
		if _, dup := at[r.Value]; dup {
			v.Phantoms++
			v.problem("value %q is in the final records twice", r.Value)
			continue
		}
		at[r.Value] = i
		if i > 0 && r.Seq <= final[i-1].Seq {
			v.Phantoms++
			v.problem("record %q at %d follows one at %d", r.Value, r.Seq, final[i-1].Seq)
		}
		if i > 0 && r.Epoch < final[i-1].Epoch {
			v.EpochDrops++
			v.problem("record %q at %d has epoch %d after epoch %d", r.Value, r.Seq, r.Epoch, final[i-1].Epoch)
		}
	}
	writes := make(map[string]*Op)
	var history []porcupine.Operation
	for i := range ops {
		op := &ops[i]
		if !op.Write {
			v.Reads++
			history = append(history, porcupine.Operation{
				ClientId: op.Client, Input: regInput{}, Output: regOutput{out: OK, seq: op.Seq, value: op.Value},
				Call: int64(op.Call), Return: int64(op.Return),
			})
			continue
		}
		v.Writes++
		writes[op.Value] = op
		in := regInput{write: true, expect: op.Expect, value: op.Value}
		switch op.Out {
		case OK:
			v.Acked++
			if i, ok := at[op.Value]; !ok {
				v.Lost++
				v.problem("acknowledged append %q at %d (after %d) is not in the final records", op.Value, op.Seq, op.Expect)
			} else if final[i].Seq != op.Seq {
				v.Lost++
				v.problem("acknowledged append %q at %d is in the final records at %d", op.Value, op.Seq, final[i].Seq)
			}
			history = append(history, porcupine.Operation{
				ClientId: op.Client, Input: in, Output: regOutput{out: OK, seq: op.Seq},
				Call: int64(op.Call), Return: int64(op.Return),
			})
		case Conflict:
			if _, ok := at[op.Value]; ok {
				v.Phantoms++
				v.problem("refused append %q (after %d) is in the final records", op.Value, op.Expect)
			}
			history = append(history, porcupine.Operation{
				ClientId: op.Client, Input: in, Output: regOutput{out: Conflict},
				Call: int64(op.Call), Return: int64(op.Return),
			})
		case Unknown:
			v.Unknown++
			i, ok := at[op.Value]
			if !ok {
				continue // it never happened
			}
			v.UnknownFound++
			history = append(history, porcupine.Operation{
				ClientId: op.Client, Input: in, Output: regOutput{out: Unknown, seq: final[i].Seq},
				Call: int64(op.Call), Return: math.MaxInt64, // it may have happened any time after its call
			})
		}
	}
	for i, r := range final {
		w, ok := writes[r.Value]
		var prev uint64
		if i > 0 {
			prev = final[i-1].Seq
		}
		switch {
		case !ok:
			v.Phantoms++
			v.problem("final record %q at %d was written by no client", r.Value, r.Seq)
		case w.Expect != prev:
			v.Phantoms++
			v.problem("final record %q at %d was written expecting %d, but follows %d", r.Value, r.Seq, w.Expect, prev)
		}
	}
	sort.SliceStable(history, func(i, j int) bool { return history[i].Call < history[j].Call })
	v.Porcupine, v.info = porcupine.CheckOperationsVerbose(Model, history, timeout)
	if v.Porcupine == porcupine.Illegal {
		v.problem("the history of %q is not linearizable", key)
	}
	return v
}

// Visualize writes porcupine's page of the key's history to path (for a history that failed).
func (v *Verdict) Visualize(path string) error { return porcupine.VisualizePath(Model, v.info, path) }
