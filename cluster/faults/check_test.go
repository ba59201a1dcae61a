package faults

import (
	"bufio"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const ms = time.Millisecond

func write(client int, expect uint64, value string, seq uint64, out Outcome, call, ret time.Duration) Op {
	return Op{Client: client, Write: true, Expect: expect, Value: value, Seq: seq, Out: out, Call: call, Return: ret}
}

func read(client int, seq uint64, value string, call, ret time.Duration) Op {
	return Op{Client: client, Seq: seq, Value: value, Out: OK, Call: call, Return: ret}
}

// S-X5: a history the engine may produce passes: racing writers with one winner, a refused
// write, an unknown write that happened (seen by a later read) and one that did not.
func TestCheck_GoodHistory(t *testing.T) {
	ops := []Op{
		write(0, 0, "a", 1, OK, 0, 10*ms),
		write(1, 0, "b", 0, Conflict, 1*ms, 11*ms),
		read(2, 1, "a", 12*ms, 13*ms),
		write(0, 1, "c", 0, Unknown, 20*ms, 30*ms), // it happened
		read(2, 3, "c", 40*ms, 41*ms),
		write(1, 3, "d", 0, Unknown, 50*ms, 60*ms), // it did not
		read(2, 3, "c", 70*ms, 71*ms),
		write(1, 3, "e", 5, OK, 80*ms, 90*ms),
	}
	final := []Record{{1, "a", 0}, {3, "c", 0}, {5, "e", 0}}
	v := Check("k", ops, final, time.Minute)
	if !v.OK() || v.Acked != 2 || v.Unknown != 2 || v.UnknownFound != 1 || v.Reads != 3 {
		t.Fatalf("verdict %+v; want a pass with 2 acked, 2 unknown (1 found), 3 reads", v)
	}
}

// S-X5: each kind of failure is caught.
func TestCheck_CatchesViolations(t *testing.T) {
	base := []Op{
		write(0, 0, "a", 1, OK, 0, 10*ms),
		write(0, 1, "b", 2, OK, 20*ms, 30*ms),
	}
	cases := []struct {
		name  string
		ops   []Op
		final []Record
		check func(*Verdict) bool
	}{
		{"lost acknowledged write", base, []Record{{1, "a", 0}},
			func(v *Verdict) bool { return v.Lost == 1 }},
		{"acknowledged write at another sequence", base, []Record{{1, "a", 0}, {3, "b", 0}},
			func(v *Verdict) bool { return v.Lost == 1 }},
		{"record nobody wrote", base, []Record{{1, "a", 0}, {2, "b", 0}, {3, "z", 0}},
			func(v *Verdict) bool { return v.Phantoms == 1 }},
		{"refused write that landed", append(base[:2:2], write(1, 2, "c", 0, Conflict, 40*ms, 50*ms)),
			[]Record{{1, "a", 0}, {2, "b", 0}, {3, "c", 0}},
			func(v *Verdict) bool { return v.Phantoms == 1 && v.Porcupine == porcupine.Illegal }},
		{"stale read", append(base[:2:2], read(1, 1, "a", 40*ms, 50*ms)),
			[]Record{{1, "a", 0}, {2, "b", 0}},
			func(v *Verdict) bool { return v.Porcupine == porcupine.Illegal }},
		{"read of the future", append([]Op{read(1, 2, "b", 11*ms, 12*ms)}, base...),
			[]Record{{1, "a", 0}, {2, "b", 0}},
			func(v *Verdict) bool { return v.Porcupine == porcupine.Illegal }},
		{"false conflict", append(base[:2:2], write(1, 2, "c", 0, Conflict, 40*ms, 50*ms)),
			[]Record{{1, "a", 0}, {2, "b", 0}},
			func(v *Verdict) bool { return v.Porcupine == porcupine.Illegal }},
		{"two winners of one sequence", append(base[:2:2], write(1, 1, "c", 3, OK, 40*ms, 50*ms)),
			[]Record{{1, "a", 0}, {2, "b", 0}, {3, "c", 0}},
			func(v *Verdict) bool { return v.Phantoms == 1 && v.Porcupine == porcupine.Illegal }},
		{"epoch going back", base, []Record{{1, "a", 2}, {2, "b", 1}},
			func(v *Verdict) bool { return v.EpochDrops == 1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Check("k", c.ops, c.final, time.Minute)
			if v.OK() || !c.check(v) {
				t.Fatalf("verdict %+v; want this failure caught", v)
			}
		})
	}
}

// S-X5: a link forwards, drops one direction, cuts and heals.
func TestLink_Modes(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	got := make(chan string, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					got <- sc.Text()
					c.Write([]byte("echo " + sc.Text() + "\n"))
				}
			}()
		}
	}()
	k, err := NewLink("127.0.0.1:0", echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", k.Addr())
		if err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}
	c, r := dial()
	say := func(s string) { c.Write([]byte(s + "\n")) }
	expect := func(ch <-chan string, want string) {
		t.Helper()
		select {
		case s := <-ch:
			if s != want {
				t.Fatalf("got %q, want %q", s, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing came through; want %q", want)
		}
	}
	replies := make(chan string, 10)
	go func() {
		for {
			s, err := r.ReadString('\n')
			if err != nil {
				close(replies)
				return
			}
			replies <- s[:len(s)-1]
		}
	}()
	say("one")
	expect(got, "one")
	expect(replies, "echo one")

	dropped := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); k.Dropped() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("the link dropped %d bytes, want %d", k.Dropped(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	k.Set(DropBackward) // the far end's replies are lost
	say("two")
	expect(got, "two")
	dropped(int64(len("echo two\n")))
	k.Set(DropForward) // what the near end says is lost
	say("three")
	dropped(int64(len("echo two\n") + len("three\n")))
	k.Set(Open)
	say("four")
	expect(got, "four") // "three" never arrived
	expect(replies, "echo four")

	k.Set(Cut)
	if _, ok := <-replies; ok {
		t.Fatal("a cut link kept its connection")
	}
	c2, _ := dial()
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatal("a cut link accepted a connection")
	}
	c2.Close()
	c.Close()
	k.Set(Open)
	c3, r3 := dial()
	c3.Write([]byte("five\n"))
	expect(got, "five")
	if s, err := r3.ReadString('\n'); err != nil || s != "echo five\n" {
		t.Fatalf("after healing: %q, %v", s, err)
	}
	c3.Close()
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	echo.Close()
	<-done
}

// S-X6: the report splits operations by fault windows: an operation is in one if any part of it
// falls between a fault's start and the grace after its end; the shares count acknowledged writes
// among those not in conflict, and reads that returned among every operation attempted.
func TestSplit_FaultWindows(t *testing.T) {
	windows := []Window{{Fault: "SIGKILL n1", Start: 100 * ms, End: 200 * ms}}
	grace := 50 * ms
	failedRead := Op{Client: 1, Out: Unknown, Call: 110 * ms, Return: 120 * ms}
	refused := write(1, 0, "r", 0, Refused, 240*ms, 245*ms)
	refused.Err = `call registers/"k1": node "n1" unreachable at 127.0.0.1:4222`
	ops := []Op{
		write(0, 0, "a", 1, OK, 0, 10*ms),             // before
		write(0, 1, "b", 0, Conflict, 20*ms, 30*ms),   // before
		read(0, 1, "a", 40*ms, 50*ms),                 // before
		write(0, 1, "c", 2, OK, 90*ms, 101*ms),        // returns inside
		failedRead,                                    // inside
		refused,                                       // in the grace
		write(0, 2, "d", 0, Unknown, 249*ms, 400*ms),  // called in the grace
		write(0, 2, "e", 0, Refused, 251*ms, 252*ms),  // after
		write(0, 2, "f", 3, OK, 260*ms, 270*ms),       // after
		read(0, 3, "f", 280*ms, 290*ms),               // after
		write(0, 3, "g", 4, OK, 300*ms, 310*ms),       // after
		write(0, 4, "h", 0, Conflict, 320*ms, 330*ms), // after
		write(0, 4, "i", 5, OK, 340*ms, 350*ms),       // after
	}
	in, out := Split(ops, windows, grace)
	wantIn := OpStats{Writes: 3, Acked: 1, Refused: 1, Unknown: 1, ReadFails: 1}
	wantOut := OpStats{Writes: 7, Acked: 4, Conflicts: 2, Refused: 1, Reads: 2}
	in.Refusals, out.Refusals = nil, nil
	if !reflect.DeepEqual(in, wantIn) {
		t.Errorf("in fault windows: %+v; want %+v", in, wantIn)
	}
	if !reflect.DeepEqual(out, wantOut) {
		t.Errorf("outside fault windows: %+v; want %+v", out, wantOut)
	}
	in, out = Split(ops, windows, grace)
	if got := in.Refusals[`call registers/"…": node "…" unreachable at N.N.N.N:N`]; got != 1 {
		t.Errorf("refusal reasons %v; want the refusal counted under its reason with names and numbers blanked", in.Refusals)
	}
	// 4 acknowledged of the 5 writes not in conflict; 2 reads of 9 operations.
	if got, want := out.AckedShare(), 4.0/5; got != want {
		t.Errorf("acked share %v; want %v", got, want)
	}
	if got, want := out.ReadShare(), 2.0/9; got != want {
		t.Errorf("read share %v; want %v", got, want)
	}
	if m := out.Misses(); len(m) != 2 {
		t.Errorf("misses %q; want both targets missed", m)
	}
	good := OpStats{Writes: 100, Acked: 81, Conflicts: 10, Refused: 9, Reads: 60}
	if m := good.Misses(); len(m) != 0 { // 81 of 90 is 90%, 60 of 160 is 37.5%
		t.Errorf("misses %q; want none", m)
	}
	bad := OpStats{Writes: 100, Acked: 80, Conflicts: 10, Refused: 10, Reads: 60}
	if m := bad.Misses(); len(m) != 1 {
		t.Errorf("misses %q; want the acknowledged share missed (80 of 90)", m)
	}
	// Time outside: 400 ms, less 100..250 and an overlapping window 240..300+50.
	if got := Outside(append(windows, Window{Start: 240 * ms, End: 300 * ms}), grace, 400*ms); got != 150*ms {
		t.Errorf("outside %v; want 150ms", got)
	}
}
