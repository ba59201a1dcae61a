package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-go/durable/core"
)

// BenchmarkBackup measures Runtime.Backup of a running directory (200
// objects of about 128 KB each) while 16 callers keep writing to those
// objects: the backup's rate (MB/s, objects/s), and the write load's rate
// before the backup (calls/s-before, over 1 s) and during it
// (calls/s-during), in the same run. One op is one whole backup.
func BenchmarkBackup(b *testing.B) {
	const objects, callers = 200, 16
	ctx := context.Background()
	rt, err := core.Open(core.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	ns, err := core.Register(rt, "tables", newTable)
	if err != nil {
		b.Fatal(err)
	}
	stubs := make([]*core.Stub[*table], objects)
	big := strings.Repeat("x", 4000)
	for i := range stubs {
		stubs[i], _ = ns.Get(fmt.Sprint("t", i))
		err := core.Do(ctx, stubs[i], func(ctx context.Context, t *table) error {
			for range 32 {
				if _, err := t.st.Storage().Exec(ctx, insertRow, big); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	var calls atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := c; ; n += callers {
				select {
				case <-stop:
					return
				default:
				}
				if err := core.Do(ctx, stubs[n%objects], insertCall); err != nil {
					b.Error(err)
					return
				}
				calls.Add(1)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(200 * time.Millisecond) // the load settles
	c0, t0 := calls.Load(), time.Now()
	time.Sleep(time.Second)
	before := float64(calls.Load()-c0) / time.Since(t0).Seconds()

	dst := b.TempDir()
	var bytes, copied int64
	var busy time.Duration
	var during int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c1, t1 := calls.Load(), time.Now()
		p, err := rt.Admin().Backup(ctx, filepath.Join(dst, fmt.Sprint(i)), core.BackupOptions{})
		if err != nil {
			b.Fatal(err)
		}
		busy += time.Since(t1)
		during += calls.Load() - c1
		bytes += p.Bytes
		copied += int64(p.Objects)
	}
	b.StopTimer()
	b.ReportMetric(float64(bytes)/1e6/busy.Seconds(), "MB/s")
	b.ReportMetric(float64(copied)/busy.Seconds(), "objects/s")
	b.ReportMetric(before, "calls/s-before")
	b.ReportMetric(float64(during)/busy.Seconds(), "calls/s-during")
}
