package mcp_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// BenchmarkBridgeStdio measures what airlock mcp adds to a call, on make bench-mcp's rows but
// for the fs_list one: a go-sdk client calls the tool through airlock mcp on stdio (a process
// of its own, as in make bench-mcp). At 1 call (c1), each call alternates with the same
// invokeTool sent straight to airlockd's socket: bridge-p50-µs minus daemon-p50-µs is the
// bridge process, its stdio and the go-sdk client. At 16 (c16), 16 goroutines make rounds
// of 160 calls. bridge-cpu-µs is the CPU the airlock mcp process spends per call, and
// bridge-switches its threads' context switches per call (both from /proc).
//
// For an A/B of two builds of airlock, name them in AIRLOCK_MCP_BINS (comma-separated): each
// runs as a bridge of its own and they take turns, call by call at c1 and round by round at
// c16, each build first in turn, so that every build sees the same machine; each reports
// bridge-p50-µs-N, bridge-cpu-µs-N and bridge-switches-N, N its place in the list. Without
// it, the airlock of this tree is built and measured.
//
//	go test -run '^$' -bench BridgeStdio -benchtime 1000x ./internal/mcp/
func BenchmarkBridgeStdio(b *testing.B) {
	e, _, _ := startBenchSession(b)
	dc := newDirectCaller(b, e)

	bins := strings.Split(os.Getenv("AIRLOCK_MCP_BINS"), ",")
	if bins[0] == "" {
		bins = []string{daemontest.Binary(b, "airlock")}
	}
	type bridge struct {
		cs  *sdk.ClientSession
		pid int
	}
	var bridges []bridge
	for _, bin := range bins {
		cmd := exec.Command(bin, "--socket", e.d.Socket, "mcp", "--session", "bench", "--generation", "1")
		cs := benchClient(b, cmd, "")
		bridges = append(bridges, bridge{cs, cmd.Process.Pid})
	}

	rows := []struct {
		name, op string
		args     map[string]any
		conc     int
	}{
		{"read_4KiB/c1", "fs.read", map[string]any{"path": "small.txt", "maxBytes": benchSmall}, 1},
		{"read_4KiB/c16", "fs.read", map[string]any{"path": "small.txt", "maxBytes": benchSmall}, 16},
		{"read_1MiB/c1", "fs.read", map[string]any{"path": "big.txt", "maxBytes": benchBig}, 1},
		{"read_1MiB/c16", "fs.read", map[string]any{"path": "big.txt", "maxBytes": benchBig}, 16},
		{"stat/c1", "fs.stat", map[string]any{"path": "small.txt"}, 1},
		{"stat/c16", "fs.stat", map[string]any{"path": "small.txt"}, 16},
	}
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) {
			direct := func() time.Duration { return dc.call(b, row.op, row.args) }
			p := &sdk.CallToolParams{Name: fsToolName(row.op), Arguments: row.args}
			bridged := func(cs *sdk.ClientSession) time.Duration { return timeCall(b, cs, p) }
			for range 10 {
				direct()
				for _, br := range bridges {
					bridged(br.cs)
				}
			}
			var dl []time.Duration
			bl := make([][]time.Duration, len(bridges))
			cpu0 := make([]time.Duration, len(bridges))
			cs0 := make([]int64, len(bridges))
			for i, br := range bridges {
				cpu0[i], cs0[i] = pidCPU(br.pid), pidSwitches(br.pid)
			}
			round := 160 // calls of one c16 round
			if testing.Short() {
				round = 16 // make bench-smoke only checks that the rows run
			}
			n := 0
			for b.Loop() {
				if row.conc == 1 {
					dl = append(dl, direct())
				}
				turn := n // who goes first: call by call at c1, round by round at c16
				if row.conc > 1 {
					turn = n / round
				}
				for k := range bridges {
					i := (turn + k) % len(bridges)
					if row.conc == 1 {
						bl[i] = append(bl[i], bridged(bridges[i].cs))
						continue
					}
					if n%round != 0 {
						continue
					}
					bl[i] = append(bl[i], callConcurrently(b, bridges[i].cs, p, row.conc, round)...)
				}
				n++
			}
			if len(dl) > 0 {
				b.ReportMetric(float64(stats(dl, sum(dl)).p50.Microseconds()), "daemon-p50-µs")
			}
			for i, br := range bridges {
				suffix := ""
				if len(bridges) > 1 {
					suffix = fmt.Sprintf("-%d", i)
				}
				b.ReportMetric(float64(stats(bl[i], sum(bl[i])).p50.Microseconds()), "bridge-p50-µs"+suffix)
				b.ReportMetric(float64((pidCPU(br.pid)-cpu0[i]).Microseconds())/float64(len(bl[i])), "bridge-cpu-µs"+suffix)
				b.ReportMetric(float64(pidSwitches(br.pid)-cs0[i])/float64(len(bl[i])), "bridge-switches"+suffix)
			}
		})
	}
}

// pidCPU is the CPU time the threads of process pid have run, from the scheduler's own
// account in /proc/PID/task/*/schedstat (nanoseconds; /proc/PID/stat counts in 10 ms ticks,
// too coarse for a few thousand calls of tens of microseconds). Pid 0 is this process, whose
// own account (getrusage) also counts the threads that have ended.
func pidCPU(pid int) time.Duration {
	if pid == 0 {
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var t time.Duration
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		ns, _, _ := strings.Cut(string(b), " ")
		x, _ := strconv.ParseInt(ns, 10, 64)
		t += time.Duration(x)
	}
	return t
}

// pidSwitches is the number of context switches, voluntary or not, of the threads of process
// pid, from /proc/PID/task/*/status.
func pidSwitches(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}
