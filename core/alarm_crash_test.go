package core_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/core"
)

const alarmChildEnv = "DURABLE_ALARM_CRASH_CHILD" // the child's data directory

type crashClock struct {
	st    *core.State
	fired chan string
}

func (c *crashClock) Alarm(context.Context, core.AlarmInfo) error {
	if c.fired != nil {
		c.fired <- c.st.Name()
	}
	return nil
}

// TestAlarmCrashChild is the child of TestAlarm_SurvivesSIGKILL: it arms
// alarms, says so once each SetAlarm's turn has returned, and waits to be
// killed.
func TestAlarmCrashChild(t *testing.T) {
	dir := os.Getenv(alarmChildEnv)
	if dir == "" {
		return // only runs as the child
	}
	rt, err := core.Open(core.Options{Dir: dir})
	require.NoError(t, err)
	ns, err := core.Register(rt, "clocks", func(_ context.Context, st *core.State) (*crashClock, error) { return &crashClock{st: st}, nil })
	require.NoError(t, err)
	due := time.Now().Add(time.Hour) // not due in the child, however slow it is
	for i := range 20 {
		s, err := ns.Get(fmt.Sprint("c", i))
		require.NoError(t, err)
		require.NoError(t, core.Do(context.Background(), s, func(ctx context.Context, c *crashClock) error { return c.st.SetAlarm(ctx, due) }))
	}
	fmt.Println("armed")
	time.Sleep(time.Minute) // killed long before
}

// Alarms survive a SIGKILL that follows SetAlarm's turn: after a restart
// every armed alarm fires, once. (The index is written before the object
// commits, DESIGN "Alarms".)
func TestAlarm_SurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAlarmCrashChild$")
	cmd.Env = append(os.Environ(), alarmChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	armed := false
	for lines.Scan() {
		if strings.TrimSpace(lines.Text()) == "armed" {
			armed = true
			break
		}
	}
	require.True(t, armed, "the child never armed its alarms")
	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no Close, no flush
	cmd.Wait()

	// Restart with the alarm clock two hours ahead: every alarm is due.
	rt, err := core.Open(core.Options{Dir: dir, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	require.NoError(t, err)
	defer rt.Close()
	fired := make(chan string, 100)
	_, err = core.Register(rt, "clocks", func(_ context.Context, st *core.State) (*crashClock, error) {
		return &crashClock{st: st, fired: fired}, nil
	})
	require.NoError(t, err)
	seen := map[string]int{}
	deadline := time.After(30 * time.Second)
	for len(seen) < 20 {
		select {
		case name := <-fired:
			seen[name]++
		case <-deadline:
			t.Fatalf("only %d of 20 alarms fired after the crash: %v", len(seen), seen)
		}
	}
	for name, n := range seen {
		require.Equal(t, 1, n, "alarm of %s fired %d times", name, n)
	}
}
