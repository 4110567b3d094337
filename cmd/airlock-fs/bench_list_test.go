package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listEntries is the size of the directory BenchmarkListThroughDaemon lists, as make
// bench-mcp's list row.
const listEntries = 1000

// BenchmarkListThroughDaemon measures fs.list of a directory of 1,000 files through airlockd
// (client → airlockd → airlock-fs) interleaved call by call with the same call to airlock-fs
// alone, both in this process; p50 of both. Run it with pprof to see either side's cost:
//
//	go test -run '^$' -bench ListThroughDaemon -benchtime 2000x -cpuprofile cpu.out ./cmd/airlock-fs/
func BenchmarkListThroughDaemon(b *testing.B) {
	e := startBenchEnv(b)
	dir := filepath.Join(e.root, "many")
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	for i := range listEntries {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d.txt", i)), []byte("x\n"), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	args := fmt.Sprintf(`{"path":"many","maxEntries":%d}`, listEntries)
	dc := dialLine(b, e.daemon, 1<<20)
	defer dc.close()
	for range 20 {
		dc.call(b, e.invokeLine("fs.list", args))
		e.direct.call(b, e.directLine("fs.list", args))
	}
	var subj, adapter []time.Duration
	for b.Loop() {
		subj = append(subj, dc.timed(b, e.invokeLine("fs.list", args)))
		adapter = append(adapter, e.direct.timed(b, e.directLine("fs.list", args)))
	}
	b.ReportMetric(float64(percentile(subj, 50).Microseconds()), "daemon-p50-µs")
	b.ReportMetric(float64(percentile(adapter, 50).Microseconds()), "adapter-p50-µs")
}
