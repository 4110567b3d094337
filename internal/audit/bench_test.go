package audit

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkAppend appends fs.write started records, typical in size, from 1 and 64 concurrent
// appenders. Besides ns/op it reports appends/s, bytes/record, the mean fdatasync latency and
// how many records one fdatasync covered (group commit).
func BenchmarkAppend(b *testing.B) {
	for _, appenders := range []int{1, 64} {
		b.Run(fmt.Sprint("appenders=", appenders), func(b *testing.B) {
			j, _, err := Open(b.TempDir()+"/audit", Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			e := Entry{Kind: KindStarted, Door: DoorOwner,
				Actor:  Actor{PID: 4242, Exe: "/usr/local/bin/airlock", Session: "s-0123456789abcdef", Generation: 7},
				Target: Target{Op: "fs.write", Path: "notes/2026/december/todo.md"},
				Args:   json.RawMessage(`{"path":"notes/2026/december/todo.md","content":"buy milk"}`), IdempotencyKey: "k-0123456789"}
			before := j.Stats()
			var wg sync.WaitGroup
			start := time.Now()
			b.ResetTimer()
			for w := range appenders {
				n := b.N / appenders
				if w < b.N%appenders {
					n++
				}
				wg.Go(func() {
					for range n {
						if _, err := j.Append(e); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			elapsed := time.Since(start)
			st := j.Stats()
			recs, syncs := st.Records-before.Records, st.Fsyncs-before.Fsyncs
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
			b.ReportMetric(float64(st.Bytes-before.Bytes)/float64(recs), "bytes/record")
			if syncs > 0 {
				b.ReportMetric(float64((st.FsyncTotal-before.FsyncTotal).Microseconds())/float64(syncs), "fsync-µs")
				b.ReportMetric(float64(recs)/float64(syncs), "records/fsync")
			}
		})
	}
}

// BenchmarkRecordCPU is the CPU an invokeTool's pair of records costs without the disk's
// share: a started record (its arguments' canonical form and digest, its key's digest) and
// its outcome, appended with SyncInterval over a long SyncEvery, so that no fdatasync runs.
func BenchmarkRecordCPU(b *testing.B) {
	j, _, err := Open(b.TempDir()+"/audit", Options{Sync: SyncInterval, SyncEvery: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	e := Entry{Kind: KindStarted, Door: DoorOwner,
		Actor:  Actor{PID: 4242, Exe: "/usr/local/bin/airlock", Session: "s-0123456789abcdef", Generation: 7},
		Target: Target{Op: "fs.write", Path: "notes/2026/december/todo.md"},
		Args:   json.RawMessage(`{"path":"notes/2026/december/todo.md","content":"buy milk"}`), IdempotencyKey: "fs.write:call-0123456789"}
	b.ReportAllocs()
	for b.Loop() {
		s, err := j.AppendNoWait(e)
		if err != nil {
			b.Fatal(err)
		}
		o := e
		o.Kind, o.Ref, o.Outcome, o.Duration, o.Args, o.IdempotencyKey = KindOutcome, s.Seq, "ok", 1500*time.Microsecond, nil, ""
		if _, err := j.Append(o); err != nil {
			b.Fatal(err)
		}
	}
}
