package mcp_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/mcp"
)

// BenchmarkBridgeHops splits make bench-mcp's airlock path into its hops, for each row:
// invokeTool sent straight to airlockd's socket (airlockd → airlock-fs, no MCP) interleaved
// call by call with the same tool called through a Bridge in this process from a go-sdk
// client on the SDK's in-memory transport (no stdio, no second process). The difference is
// the bridge and the SDK on both ends (bridge-cpu-p50-µs is the CPU time this process spends
// on a bridged call: client, SDK and bridge); make bench-mcp adds the stdio hop. Run it with
// -cpuprofile to profile the bridge and the client:
//
//	go test -run '^$' -bench BridgeHops -benchtime 300x -cpuprofile cpu.out ./internal/mcp/
func BenchmarkBridgeHops(b *testing.B) {
	e, _, _ := startBenchSession(b)
	cn := e.connect(b, mcp.Config{SessionID: "bench", Generation: 1})
	dc := newDirectCaller(b, e)

	rows := []struct {
		name, op string
		args     map[string]any
	}{
		{"read_4KiB", "fs.read", map[string]any{"path": "small.txt", "maxBytes": benchSmall}},
		{"read_1MiB", "fs.read", map[string]any{"path": "big.txt", "maxBytes": benchBig}},
		{"list_1000", "fs.list", map[string]any{"path": "many", "maxEntries": benchEntries}},
		{"stat", "fs.stat", map[string]any{"path": "small.txt"}},
	}
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) {
			direct := func() time.Duration { return dc.call(b, row.op, row.args) }
			var cpu []time.Duration
			bridged := func() time.Duration {
				start, c0 := time.Now(), processCPU()
				r := cn.call(b, fsToolName(row.op), row.args)
				d := time.Since(start)
				cpu = append(cpu, processCPU()-c0)
				if r.IsError {
					b.Fatalf("%s: %s", row.op, text(r))
				}
				return d
			}
			for range 10 {
				direct()
				bridged()
			}
			var dl, bl []time.Duration
			cpu = cpu[:0]
			for b.Loop() {
				dl = append(dl, direct())
				bl = append(bl, bridged())
			}
			d50, b50 := stats(dl, sum(dl)).p50, stats(bl, sum(bl)).p50
			b.ReportMetric(float64(d50.Microseconds()), "daemon-p50-µs")
			b.ReportMetric(float64(b50.Microseconds()), "bridge-p50-µs")
			b.ReportMetric(float64(stats(cpu, 0).p50.Microseconds()), "bridge-cpu-p50-µs")
		})
	}
}

// processCPU is the CPU time this process (the go-sdk client, the Bridge and its daemon
// client) has used; airlockd and airlock-fs are processes of their own.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fsToolName(op string) string {
	return map[string]string{"fs.read": "fs_read", "fs.list": "fs_list", "fs.stat": "fs_stat"}[op]
}
