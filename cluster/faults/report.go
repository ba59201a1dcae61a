package faults

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Window is the time a fault may disturb the cluster: from the moment the harness injects it (a
// SIGKILL, a SIGSTOP, a cut link, a SIGTERM) until a grace after the cluster is whole again: the
// fault healed (the node restarted and accepting connections, continued, or its links opened) and
// every node ready (for a Target that is a Readier: the runtime target's nodes answer GET /readyz).
// The grace covers what settles after that: shards handed back to a node that returned, tables
// updated, leases renewed.
type Window struct {
	Fault      string        // what was done, as the log line says
	Start, End time.Duration // since the start of the run: injected; healed and every node ready
}

// DefaultGrace is how long a fault's window lasts after the cluster is whole again, unless
// Config.Grace says otherwise: three lease times of the runtime's default (1 s).
const DefaultGrace = 3 * time.Second

// Availability targets (SEMANTICS X6): outside fault windows, at least MinAcked of the attempted
// writes the workload's own contention did not refuse are acknowledged, and reads that returned
// are at least MinReads of the operations attempted.
const (
	MinAcked = 0.90
	MinReads = 0.30
)

// OpStats counts the operations attempted in one class of time (inside fault windows, or outside).
type OpStats struct {
	Writes    int // attempted
	Acked     int
	Conflicts int // refused by the register's own check: another writer got there first
	Refused   int // refused before anything was stored: no node could serve the key
	Unknown   int
	Reads     int // reads that returned
	ReadFails int // reads that did not
	Refusals  map[string]int
}

// Ops is the operations attempted: writes and reads, returned or not.
func (s *OpStats) Ops() int { return s.Writes + s.Reads + s.ReadFails }

// AckedShare is the share of the attempted writes that were acknowledged, not counting those the
// workload's own contention refused (conflicts): a conflict is the register answering, not a
// failure of the cluster. It is 1 when there is no such write.
func (s *OpStats) AckedShare() float64 {
	if n := s.Writes - s.Conflicts; n > 0 {
		return float64(s.Acked) / float64(n)
	}
	return 1
}

// ReadShare is the share of the attempted operations that were reads that returned (the reads in
// the history the linearizability check sees).
func (s *OpStats) ReadShare() float64 {
	if n := s.Ops(); n > 0 {
		return float64(s.Reads) / float64(n)
	}
	return 0
}

func (s *OpStats) add(op *Op) {
	if !op.Write {
		if op.Out == OK {
			s.Reads++
		} else {
			s.ReadFails++
		}
		return
	}
	s.Writes++
	switch op.Out {
	case OK:
		s.Acked++
	case Conflict:
		s.Conflicts++
	case Refused:
		s.Refused++
		if s.Refusals == nil {
			s.Refusals = make(map[string]int)
		}
		s.Refusals[reason(op.Err)]++
	default:
		s.Unknown++
	}
}

// String is one line of the report.
func (s *OpStats) String() string {
	return fmt.Sprintf("writes=%d acked=%d (%.1f%% of writes, %.1f%% of those not in conflict) conflicts=%d refused=%d unknown=%d reads=%d (%.1f%% of %d ops) failed-reads=%d",
		s.Writes, s.Acked, pct(s.Acked, s.Writes), 100*s.AckedShare(), s.Conflicts, s.Refused, s.Unknown, s.Reads, 100*s.ReadShare(), s.Ops(), s.ReadFails)
}

// TopRefusals names the most frequent reasons of refusals, at most n, most frequent first.
func (s *OpStats) TopRefusals(n int) string {
	type rc struct {
		r string
		n int
	}
	var rs []rc
	for r, c := range s.Refusals {
		rs = append(rs, rc{r, c})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].n > rs[j].n || rs[i].n == rs[j].n && rs[i].r < rs[j].r })
	var b strings.Builder
	for i, r := range rs {
		if i == n {
			break
		}
		fmt.Fprintf(&b, "\n  %d× %s", r.n, r.r)
	}
	return b.String()
}

// Misses describes each availability target s misses (MinAcked, MinReads); none if it meets them.
func (s *OpStats) Misses() []string {
	var m []string
	if a := s.AckedShare(); a < MinAcked {
		m = append(m, fmt.Sprintf("%.1f%% of the writes not in conflict acknowledged outside fault windows, under %.0f%%", 100*a, 100*MinAcked))
	}
	if r := s.ReadShare(); r < MinReads {
		m = append(m, fmt.Sprintf("reads are %.1f%% of the operations outside fault windows, under %.0f%%", 100*r, 100*MinReads))
	}
	return m
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// Split counts ops by whether each was attempted in a fault window: an operation is in one if
// any part of it, from its call to its return, falls between a window's start and grace after its
// end.
func Split(ops []Op, windows []Window, grace time.Duration) (in, out OpStats) {
	for i := range ops {
		op := &ops[i]
		if inWindow(op, windows, grace) {
			in.add(op)
		} else {
			out.add(op)
		}
	}
	return in, out
}

func inWindow(op *Op, windows []Window, grace time.Duration) bool {
	for _, w := range windows {
		if op.Return >= w.Start && op.Call <= w.End+grace {
			return true
		}
	}
	return false
}

// Outside is the time of the run outside every fault window, of a run that lasted total.
func Outside(windows []Window, grace, total time.Duration) time.Duration {
	ws := append([]Window(nil), windows...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].Start < ws[j].Start })
	var covered, reach time.Duration
	for _, w := range ws {
		s, e := max(w.Start, reach), min(w.End+grace, total)
		if e > s {
			covered += e - s
		}
		reach = max(reach, e)
	}
	return max(total-covered, 0)
}

var (
	quoted = regexp.MustCompile(`"[^"]*"`)
	digits = regexp.MustCompile(`[0-9]+`)
)

// reason is an error's message with its names and numbers blanked, so that refusals for the same
// reason count together.
func reason(msg string) string {
	msg = quoted.ReplaceAllString(msg, `"…"`)
	msg = digits.ReplaceAllString(msg, "N")
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return msg
}

// Summary is what a run found.
type Summary struct {
	Target                                   string
	Nodes                                    int
	Seed                                     uint64
	Duration                                 time.Duration
	Cycles, Kills, KillAlls, Stops, Restarts int
	Partitions, OneWay                       int
	// Ops are the operations in the histories: writes, and reads that returned.
	Ops, Writes, Acked, Conflicts, Unknown, Reads int
	Refused, LogRecords                           int
	Lost, Phantoms, EpochDrops                    int
	Verdicts                                      []*Verdict

	// The split by fault windows (Split): operations attempted in one, and the others.
	Windows []Window
	Grace   time.Duration
	Ran     time.Duration // from the clients' start to their stop
	In, Out OpStats

	Alarms *AlarmSummary // the alarm workload's findings; nil without Config.Alarms
}

// OK reports whether every key passed every checker.
func (s *Summary) OK() bool {
	for _, v := range s.Verdicts {
		if !v.OK() {
			return false
		}
	}
	return len(s.Verdicts) > 0
}

// count adds ops to the split and to the totals, which are its two classes together (Split puts
// every operation in exactly one).
func (s *Summary) count(ops []Op) {
	in, out := Split(ops, s.Windows, s.Grace)
	s.In.merge(&in)
	s.Out.merge(&out)
	for _, c := range [...]*OpStats{&in, &out} {
		s.Ops += c.Writes + c.Reads
		s.Writes += c.Writes
		s.Reads += c.Reads
		s.Acked += c.Acked
		s.Conflicts += c.Conflicts
		s.Refused += c.Refused
		s.Unknown += c.Unknown
	}
}

func (s *OpStats) merge(o *OpStats) {
	s.Writes += o.Writes
	s.Acked += o.Acked
	s.Conflicts += o.Conflicts
	s.Refused += o.Refused
	s.Unknown += o.Unknown
	s.Reads += o.Reads
	s.ReadFails += o.ReadFails
	for r, n := range o.Refusals {
		if s.Refusals == nil {
			s.Refusals = make(map[string]int)
		}
		s.Refusals[r] += n
	}
}

// String is the summary: a line of totals and verdicts, and a line per class of time.
func (s *Summary) String() string {
	var ps []string
	for _, v := range s.Verdicts {
		ps = append(ps, fmt.Sprintf("%s=%s", v.Key, v.Porcupine))
	}
	outside := Outside(s.Windows, s.Grace, s.Ran)
	return fmt.Sprintf("faults: target=%s nodes=%d seed=%d duration=%v cycles=%d kills=%d killalls=%d stops=%d restarts=%d partitions=%d oneway=%d ops=%d writes=%d acked=%d conflicts=%d unknown=%d refused=%d reads=%d acked-checked=%d lost=%d phantoms=%d log-records=%d epoch-drops=%d porcupine: %s",
		s.Target, s.Nodes, s.Seed, s.Duration, s.Cycles, s.Kills, s.KillAlls, s.Stops, s.Restarts, s.Partitions, s.OneWay,
		s.Ops, s.Writes, s.Acked, s.Conflicts, s.Unknown, s.Refused, s.Reads, s.Acked, s.Lost, s.Phantoms, s.LogRecords, s.EpochDrops, strings.Join(ps, " ")) +
		fmt.Sprintf("\nfaults: in fault windows (from a fault to %v after every node is ready again; %v of %v): %s",
			s.Grace, (s.Ran-outside).Round(time.Second), s.Ran.Round(time.Second), &s.In) +
		fmt.Sprintf("\nfaults: outside fault windows (%v): %s", outside.Round(time.Second), &s.Out)
}
