package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// Bench sizes: the rows the reference server's users call most, at the sizes the issue names.
const (
	benchSmall   = 4 << 10
	benchBig     = 1 << 20
	benchEntries = 1000
	benchWarmup  = 50 // calls per server before a row is measured (Node.js compiles hot code)
	// benchFloorCalls is how many calls each floor of make bench-mcp makes per answer.
	benchFloorCalls = 200
)

// benchRow is one operation, as each server spells it.
type benchRow struct {
	name     string
	air, ref *sdk.CallToolParams
	// check validates one answer of each server (the first of each row), so that a row never
	// measures an error.
	checkAir, checkRef func(*sdk.CallToolResult) error
	// firstAir and firstRef are each server's first answer, for clientFloor.
	firstAir, firstRef *sdk.CallToolResult
}

// benchStats are one server's figures for one row.
type benchStats struct {
	p50, p99 time.Duration
	perSec   float64
	// cpu is, at more than one call at once, the CPU each process of the server's path spent
	// per call (benchSide.procs, in order).
	cpu []time.Duration
}

// benchSide is one server as make bench-mcp calls it: its client session, and the processes
// of its path whose CPU it reports per call at 16 calls (pid 0 is this process, the go-sdk
// client).
type benchSide struct {
	cs    *sdk.ClientSession
	procs []benchProc
}

type benchProc struct {
	name string
	pid  int
}

// addCPU runs f and adds to cpu[i] the CPU time procs[i] used meanwhile.
func addCPU(cpu []time.Duration, procs []benchProc, f func()) {
	before := procsCPU(procs, true)
	f()
	for i, c := range procsCPU(procs, false) {
		cpu[i] += c - before[i]
	}
}

// procsCPU is the CPU time each of procs has used so far. This process's own (pid 0) is read
// last at the start of a round and first at its end, so that its figure for the round leaves
// out the reading of the others'.
func procsCPU(procs []benchProc, start bool) []time.Duration {
	t := make([]time.Duration, len(procs))
	read := func(self bool) {
		for i, p := range procs {
			if (p.pid == 0) == self {
				t[i] = pidCPU(p.pid)
			}
		}
	}
	read(!start)
	read(start)
	return t
}

// BenchmarkMCPFilesystem is make bench-mcp: one go-sdk client, on stdio, calls airlock's fs
// tools through the whole path (client → airlock mcp → airlockd → airlock-fs) and the
// reference MCP filesystem server (@modelcontextprotocol/server-filesystem, Node.js, pinned in
// testdata/clients) on the same directory, row by row:
//
//   - read_text_file vs fs_read of a 4 KiB and a 1 MiB file;
//   - list_directory vs fs_list of a directory of 1,000 files, and list_directory_with_sizes
//     (which, as fs_list does, stats each entry for its size) vs fs_list;
//   - get_file_info vs fs_stat of one file.
//
// At 1 concurrent call the two servers' calls alternate one by one; at 16, 16 goroutines call
// one server for a round of 160 calls, then the other, each server first in every other round.
// Each row reports p50, p99 and calls/s of both, and the reference p50 over airlock's (the
// target is ≥ 1 on every row, issue #25); at 16, also the CPU per call of each process on
// each server's path (the go-sdk client, airlock mcp, airlockd and airlock-fs; the client and
// Node.js), which is what the p50 follows when both cores are busy. The 1 MiB read
// needs more than the default 1 MiB response limits: the grant allows 2 MiB responses
// (--max-response-bytes) and airlockd is started with --max-response-bytes 2 MiB. After the
// rows, each server's first answer of each row is replayed to a fresh client by a stand-in
// that answers at once (clientFloor): what the client alone spends on that answer, a part of
// that server's p50 no server can save, and so the best ratio any server with airlock's
// answers could reach; beside it, the same call straight to airlockd (invokeTool: airlockd
// and airlock-fs), so that what is left of airlock's p50 at 1 call is airlock mcp and its
// stdio. At 16 calls, the stand-in is a process in airlock mcp's place, and its CPU per call
// with the client's, airlockd's and airlock-fs's is the floor of airlock's path on two busy
// cores (processFloorCPU). Then both advisories' attacks (advisory_test.go) go to both servers
// and their outcomes are printed. Run it as
//
//	go test -run '^$' -bench '^BenchmarkMCPFilesystem$' -benchtime 1000x ./internal/mcp/
func BenchmarkMCPFilesystem(b *testing.B) {
	npmBin(b, "mcp-server-filesystem")
	e, fsp, dir := startBenchSession(b)
	l := makeAdvisoryLayout(b, filepath.Join(filepath.Dir(dir), "adv"))
	e.openMode(b, "adv", l.root, fsp.grant(b, e.host, l.root, "adv", 1, "fs.read,fs.list,fs.write"), "memory")

	airCmd := exec.Command(daemontest.Binary(b, "airlock"), "--socket", e.d.Socket, "mcp", "--session", "bench", "--generation", "1")
	refCmd := nodeCommand(b, context.Background(), "mcp-server-filesystem", dir)
	// AIRLOCK_BENCH_MCP_REVISION pins the revision the client asks airlock for (by default the
	// newest both support, 2026-07-28, whose requests and answers carry metadata on every
	// call; the reference speaks 2025-11-25).
	air := benchSide{cs: benchClient(b, airCmd, os.Getenv("AIRLOCK_BENCH_MCP_REVISION"))}
	ref := benchSide{cs: benchClient(b, refCmd, "")}
	// airlock mcp is second: the CPU table's last ratio leaves its share out.
	air.procs = []benchProc{{"client", 0}, {"airlock mcp", airCmd.Process.Pid}, {"airlockd", e.d.Cmd.Process.Pid}, {"airlock-fs", fsp.pid}}
	ref.procs = []benchProc{{"client", 0}, {"node", refCmd.Process.Pid}}

	rows := benchRows(dir)

	type result struct {
		row      string
		conc     int
		air, ref benchStats
		ratio    float64
	}
	var results []result
	minRatio := 0.0
	for i := range rows {
		row := &rows[i]
		for _, conc := range []int{1, 16} {
			name := fmt.Sprintf("%s/c%d", row.name, conc)
			b.Run(name, func(b *testing.B) {
				a, r := measureRow(b, air, ref, row, conc, b.N)
				ratio := float64(r.p50) / float64(a.p50)
				b.ReportMetric(float64(a.p50.Microseconds()), "airlock-p50-µs")
				b.ReportMetric(float64(r.p50.Microseconds()), "ref-p50-µs")
				b.ReportMetric(ratio, "ratio-p50")
				if (b.N < benchWarmup && !testing.Short()) || b.Failed() {
					// The harness's first, one-call run, or a row with failed calls. make
					// bench-smoke's one call a row is kept, so that the floors below run.
					return
				}
				results = slices.DeleteFunc(results, func(x result) bool { return x.row == row.name && x.conc == conc })
				results = append(results, result{row: row.name, conc: conc, air: a, ref: r, ratio: ratio})
			})
		}
	}
	for _, x := range results {
		if minRatio == 0 || x.ratio < minRatio {
			minRatio = x.ratio
		}
	}

	// find returns the result of row at conc calls, or nil.
	find := func(row string, conc int) *result {
		for i := range results {
			if results[i].row == row && results[i].conc == conc {
				return &results[i]
			}
		}
		return nil
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "\nairlock (client → airlock mcp → airlockd → airlock-fs) vs @modelcontextprotocol/server-filesystem, one go-sdk client on stdio, at revisions %s and %s\n",
		air.cs.InitializeResult().ProtocolVersion, ref.cs.InitializeResult().ProtocolVersion)
	fmt.Fprintf(&sb, "%-15s %4s | %10s %10s %9s | %10s %10s %9s | %s\n", "row", "conc",
		"air p50", "air p99", "air c/s", "ref p50", "ref p99", "ref c/s", "ref/air p50")
	for _, x := range results {
		fmt.Fprintf(&sb, "%-15s %4d | %10s %10s %9.0f | %10s %10s %9.0f | %.2f×\n", x.row, x.conc,
			round(x.air.p50), round(x.air.p99), x.air.perSec, round(x.ref.p50), round(x.ref.p99), x.ref.perSec, x.ratio)
	}
	if len(results) > 0 {
		fmt.Fprintf(&sb, "smallest ratio %.2f× (target ≥ 1×)\n", minRatio)
		// At 16 calls the two cores are busy and a row's p50 follows the CPU that each call
		// costs the processes on its path: each server's, and the client's on its answers.
		fmt.Fprintf(&sb, "\nCPU per call at 16 calls (each process's own account over its server's calls)\n%-15s |", "row")
		for _, p := range air.procs {
			fmt.Fprintf(&sb, " %11s", p.name)
		}
		fmt.Fprintf(&sb, " %9s |", "air total")
		for _, p := range ref.procs {
			fmt.Fprintf(&sb, " %9s", p.name)
		}
		// Without airlock mcp's share, what is left of airlock's total is the client on its
		// answers, airlockd and airlock-fs: a ratio below 1 there is a row that no airlock mcp
		// could take above 1.
		fmt.Fprintf(&sb, " %9s | ref total / air total, / (air total - airlock mcp)\n", "ref total")
		for _, x := range results {
			if len(x.air.cpu) == 0 {
				continue
			}
			fmt.Fprintf(&sb, "%-15s |", x.row)
			ta, tr := sum(x.air.cpu), sum(x.ref.cpu)
			for _, c := range x.air.cpu {
				fmt.Fprintf(&sb, " %11s", round(c))
			}
			fmt.Fprintf(&sb, " %9s |", round(ta))
			for _, c := range x.ref.cpu {
				fmt.Fprintf(&sb, " %9s", round(c))
			}
			fmt.Fprintf(&sb, " %9s | %.2f×, %.2f×\n", round(tr), float64(tr)/float64(max(ta, 1)), float64(tr)/float64(max(ta-x.air.cpu[1], 1)))
		}
		// What the client alone spends on each server's answer bounds the ratio any server
		// could reach: airlock at zero cost would still take its client floor. The same with
		// the stand-in a process of its own on real pipes adds the stdio and a server
		// process's wake-ups: the floor of any one-process server. Beside them, the same call
		// sent straight to airlockd as invokeTool (airlockd and airlock-fs, no MCP): airlock's
		// path is a server process (airlock mcp) in front of that, so the process floor plus
		// daemon+fs is the floor of airlock's path, and what is left of its p50 at 1 call
		// (rest) is what airlock mcp spends beyond a server that does nothing. The process
		// floor and daemon+fs are measured as the rows are, each call after a reference call,
		// so that every process on the path waits between calls and pays its wake-ups.
		dc := newDirectCaller(b, e)
		floorN := benchFloorCalls
		if testing.Short() {
			floorN = 5 // make bench-smoke only checks that the floors run
		}
		fmt.Fprintf(&sb, "\nwhose is airlock's p50 at 1 call (%d calls each): the go-sdk client's own p50 per answer (a stand-in in the\n", floorN)
		fmt.Fprintf(&sb, "client's process that answers at once), the same with the stand-in a process on real pipes (process floor),\n")
		fmt.Fprintf(&sb, "airlockd and airlock-fs (invokeTool straight to airlockd), and the rest: air p50 - process floor - daemon+fs\n")
		fmt.Fprintf(&sb, "%-15s | %10s %10s | %10s %10s | %10s %10s %10s | %s\n", "row", "air answer", "ref answer", "air proc", "ref proc",
			"air p50", "daemon+fs", "rest", "ref c1 p50 / air answer (best ratio possible), / (air proc + daemon+fs) (airlock's path)")
		for _, row := range rows {
			if row.firstAir == nil || row.firstRef == nil {
				continue
			}
			fa, fr := clientFloor(b, row.firstAir, floorN), clientFloor(b, row.firstRef, floorN)
			refCall := func() { timeCall(b, ref.cs, row.ref) }
			pa, pr := processFloor(b, row.firstAir, floorN, refCall), processFloor(b, row.firstRef, floorN, refCall)
			op := strings.Replace(row.air.Name, "fs_", "fs.", 1)
			args := row.air.Arguments.(map[string]any)
			var dl []time.Duration
			for range floorN {
				refCall()
				dl = append(dl, dc.call(b, op, args))
			}
			direct := stats(dl, sum(dl)).p50
			best, air, rest := "", "", ""
			if x := find(row.name, 1); x != nil {
				best = fmt.Sprintf("%.2f×, %.2f×", float64(x.ref.p50)/float64(fa), float64(x.ref.p50)/float64(pa+direct))
				air, rest = round(x.air.p50), round(x.air.p50-pa-direct)
			}
			fmt.Fprintf(&sb, "%-15s | %10s %10s | %10s %10s | %10s %10s %10s | %s\n", row.name, round(fa), round(fr), round(pa), round(pr), air, round(direct), rest, best)
		}
		// At 16 calls, the same stand-in process in airlock mcp's place, in rounds that
		// alternate with the reference's as the rows' do: its CPU and the client's per call,
		// with airlockd's and airlock-fs's from the row, are what airlock's path would cost if
		// airlock mcp spent nothing beyond a server process that does nothing. Below 1 against
		// the reference's total, the row's floor is above the reference's on two busy cores.
		fmt.Fprintf(&sb, "\nairlock's floor at 16 calls, CPU per call (%d calls each): a stand-in process that answers at once in airlock mcp's\n", 4*floorN)
		fmt.Fprintf(&sb, "place, the client on its answers, airlockd and airlock-fs from the row: their floor total against the reference's total\n")
		fmt.Fprintf(&sb, "%-15s | %10s %10s %10s %10s %10s | %11s | %10s %10s | %s\n", "row", "client", "stand-in", "airlockd", "airlock-fs", "floor",
			"airlock mcp", "air total", "ref total", "ref total / floor total")
		for _, row := range rows {
			x := find(row.name, 16)
			if x == nil || len(x.air.cpu) != len(air.procs) || row.firstAir == nil {
				continue
			}
			refRound := func() { callConcurrently(b, ref.cs, row.ref, 16, min(160, 4*floorN)) }
			si, cl := processFloorCPU(b, row.firstAir, 16, 4*floorN, refRound)
			floor := cl + si + x.air.cpu[2] + x.air.cpu[3]
			tr := sum(x.ref.cpu)
			fmt.Fprintf(&sb, "%-15s | %10s %10s %10s %10s %10s | %11s | %10s %10s | %.2f×\n", row.name, round(cl), round(si), round(x.air.cpu[2]), round(x.air.cpu[3]),
				round(floor), round(x.air.cpu[1]), round(sum(x.air.cpu)), round(tr), float64(tr)/float64(max(floor, 1)))
		}
	}

	// The advisories, against both servers: airlock's second session and a reference server
	// whose allowed directory is the layout's root.
	advAir := benchClient(b, exec.Command(daemontest.Binary(b, "airlock"), "--socket", e.d.Socket, "mcp", "--session", "adv", "--generation", "1"), "")
	advRef := benchClient(b, nodeCommand(b, context.Background(), "mcp-server-filesystem", l.root), "")
	var version string
	if v, err := os.ReadFile(filepath.Join(clientsDir, "node_modules", "@modelcontextprotocol", "server-filesystem", "package.json")); err == nil {
		var p struct{ Version string }
		json.Unmarshal(v, &p)
		version = p.Version
	}
	fmt.Fprintf(&sb, "\nthe 2025 advisories of server-filesystem (reference at %s); allowed/grant root %s\n", version, l.root)
	for _, c := range advisoryCases {
		a := runAdvisory(advAir, l, c, c.airlockCall(l))
		r := runAdvisory(advRef, l, c, c.referenceCall(l))
		verdict := func(o advisoryOutcome) string {
			if o.refused {
				return "refused: " + o.detail
			}
			return "NOT REFUSED: " + o.detail
		}
		fmt.Fprintf(&sb, "%s %s (%s)\n    airlock:   %s\n    reference: %s\n", c.advisory, c.name, c.referenceCall(l).Arguments.(map[string]any)["path"], verdict(a), verdict(r))
		if !a.refused {
			b.Errorf("airlock did not refuse %s %s", c.advisory, c.name)
		}
	}
	fmt.Print(sb.String())
	if minRatio > 0 {
		b.ReportMetric(minRatio, "min-ratio-p50")
	}
}

// benchRows are make bench-mcp's rows on the bench's directory dir.
func benchRows(dir string) []benchRow {
	return []benchRow{
		readRow("read_4KiB", dir, "small.txt", benchSmall),
		readRow("read_1MiB", dir, "big.txt", benchBig),
		{
			name:     "list_1000",
			air:      &sdk.CallToolParams{Name: "fs_list", Arguments: map[string]any{"path": "many", "maxEntries": benchEntries}},
			ref:      &sdk.CallToolParams{Name: "list_directory", Arguments: map[string]any{"path": filepath.Join(dir, "many")}},
			checkAir: checkList,
			checkRef: checkRefList("list_directory"),
		},
		{
			// The reference's listing that, like fs_list, stats every entry for its size.
			name:     "list_1000_sizes",
			air:      &sdk.CallToolParams{Name: "fs_list", Arguments: map[string]any{"path": "many", "maxEntries": benchEntries}},
			ref:      &sdk.CallToolParams{Name: "list_directory_with_sizes", Arguments: map[string]any{"path": filepath.Join(dir, "many")}},
			checkAir: checkList,
			checkRef: checkRefList("list_directory_with_sizes"),
		},
		{
			name: "stat",
			air:  &sdk.CallToolParams{Name: "fs_stat", Arguments: map[string]any{"path": "small.txt"}},
			ref:  &sdk.CallToolParams{Name: "get_file_info", Arguments: map[string]any{"path": filepath.Join(dir, "small.txt")}},
			checkAir: func(r *sdk.CallToolResult) error {
				var v struct {
					Size int `json:"size"`
				}
				if err := decodeStructured(r, &v); err != nil || v.Size != benchSmall {
					return fmt.Errorf("fs_stat: size %d, %v", v.Size, err)
				}
				return nil
			},
			checkRef: func(r *sdk.CallToolResult) error {
				if r.IsError || !strings.Contains(text(r), fmt.Sprint(benchSmall)) {
					return fmt.Errorf("get_file_info: %.200s", text(r))
				}
				return nil
			},
		},
	}
}

// readRow reads a whole file of size bytes: fs_read with maxBytes, read_text_file by path.
func readRow(name, dir, file string, size int) benchRow {
	return benchRow{
		name: name,
		air:  &sdk.CallToolParams{Name: "fs_read", Arguments: map[string]any{"path": file, "maxBytes": size}},
		ref:  &sdk.CallToolParams{Name: "read_text_file", Arguments: map[string]any{"path": filepath.Join(dir, file)}},
		checkAir: func(r *sdk.CallToolResult) error {
			var v struct {
				Content string `json:"content"`
				EOF     bool   `json:"eof"`
			}
			if err := decodeStructured(r, &v); err != nil || len(v.Content) != size || !v.EOF || text(r) != v.Content {
				return fmt.Errorf("fs_read %s: %d bytes, eof %v, %v", file, len(v.Content), v.EOF, err)
			}
			return nil
		},
		checkRef: func(r *sdk.CallToolResult) error {
			if r.IsError || len(text(r)) != size {
				return fmt.Errorf("read_text_file %s: %d bytes: %.200s", file, len(text(r)), text(r))
			}
			return nil
		},
	}
}

// checkList checks fs_list's answer of the bench's directory of benchEntries files.
func checkList(r *sdk.CallToolResult) error {
	var v struct {
		Entries   []json.RawMessage `json:"entries"`
		Truncated bool              `json:"truncated"`
	}
	if err := decodeStructured(r, &v); err != nil || len(v.Entries) != benchEntries || v.Truncated {
		return fmt.Errorf("fs_list: %d entries, truncated %v, %v", len(v.Entries), v.Truncated, err)
	}
	return nil
}

// checkRefList checks the reference's answer of tool, a listing of the bench's directory of
// benchEntries files.
func checkRefList(tool string) func(*sdk.CallToolResult) error {
	return func(r *sdk.CallToolResult) error {
		if n := strings.Count(text(r), "[FILE]"); r.IsError || n != benchEntries {
			return fmt.Errorf("%s: %d files: %.200s", tool, n, text(r))
		}
		return nil
	}
}

// writeBenchTree writes the files both servers serve.
func writeBenchTree(b testing.TB, dir string) {
	line := strings.Repeat("0123456789abcdef", 4)[:63] + "\n"
	files := map[string]string{
		"small.txt": strings.Repeat(line, benchSmall/64),
		"big.txt":   strings.Repeat(line, benchBig/64),
	}
	for i := range benchEntries {
		files[fmt.Sprintf("many/f%04d.txt", i)] = "x\n"
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			b.Fatal(err)
		}
	}
}

// startBenchSession starts airlockd and airlock-fs, both allowing 2 MiB answers (for the
// 1 MiB read), writes the bench tree and opens it as session "bench", generation 1, with
// fs.read, fs.list, fs.stat, fs.write and fs.edit (make bench-mcp-ts writes). It returns the
// tree's directory too.
func startBenchSession(b *testing.B) (*env, *fsService, string) {
	b.Helper()
	e := startEnvWith(b, daemontest.Options{Args: []string{"--max-response-bytes", fmt.Sprint(2 << 20)}})
	fsp := startFS(b)
	dir := filepath.Join(filepath.Dir(e.root), "bench")
	writeBenchTree(b, dir)
	e.openMode(b, "bench", dir, fsp.grant(b, e.host, dir, "bench", 1, "fs.read,fs.list,fs.stat,fs.write,fs.edit",
		"--max-response-bytes", fmt.Sprint(2<<20)), "memory")
	return e, fsp, dir
}

// directCaller sends a tool call straight to airlockd's socket as invokeTool (airlockd →
// airlock-fs, no MCP), the baseline the bridge benchmarks set their calls against.
type directCaller struct {
	c   *client.Client
	seq int // for distinct toolCallIds
}

func newDirectCaller(b *testing.B, e *env) *directCaller {
	c := e.d.Dial()
	b.Cleanup(func() { c.Close() })
	return &directCaller{c: c}
}

// call invokes op with args on session "bench" and returns its latency; a failed call fails
// the benchmark.
func (d *directCaller) call(b *testing.B, op string, args map[string]any) time.Duration {
	d.seq++
	start := time.Now()
	r, err := d.c.Call(context.Background(), client.Command{Operation: "invokeTool", SessionID: "bench", Generation: gen(1),
		Payload: map[string]any{"toolCallId": "direct-" + strconv.Itoa(d.seq), "operation": op, "arguments": args}})
	took := time.Since(start)
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		b.Fatalf("invokeTool: %v", err)
	}
	return took
}

// benchClient connects a go-sdk client to the server cmd runs on stdio. The client advertises
// no capabilities: with roots, the reference server would replace its allowed directory with
// the client's roots. A revision other than "" is the protocol revision the client asks for.
func benchClient(b *testing.B, cmd *exec.Cmd, revision string) *sdk.ClientSession {
	b.Helper()
	cl := sdk.NewClient(&sdk.Implementation{Name: "bench-mcp", Version: "1"}, &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &sdk.CommandTransport{Command: cmd}, &sdk.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		b.Fatalf("connect %s: %v", cmd.Path, err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// measureRow runs warm-up calls, checks one answer of each server, then n measured calls of
// each at conc concurrent calls. At 1, the two servers' calls alternate one by one; at more,
// in rounds of ten calls per goroutine, each server first in every other round, so that both
// see the same machine and neither always runs after the other has warmed it.
func measureRow(b *testing.B, air, ref benchSide, row *benchRow, conc, n int) (benchStats, benchStats) {
	b.Helper()
	ctx := context.Background()
	warmup := benchWarmup
	if testing.Short() {
		warmup = 2 // make bench-smoke only checks that the rows run
	}
	for i := range warmup {
		for _, s := range []struct {
			cs    *sdk.ClientSession
			p     *sdk.CallToolParams
			check func(*sdk.CallToolResult) error
			first **sdk.CallToolResult
		}{{air.cs, row.air, row.checkAir, &row.firstAir}, {ref.cs, row.ref, row.checkRef, &row.firstRef}} {
			r, err := s.cs.CallTool(ctx, s.p)
			if err == nil && i == 0 {
				err = s.check(r)
				*s.first = r
			}
			if err != nil {
				b.Fatalf("%s: %v", row.name, err)
			}
		}
	}
	b.ResetTimer()
	if conc == 1 {
		la, lr := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
		for range n {
			la = append(la, timeCall(b, air.cs, row.air))
			lr = append(lr, timeCall(b, ref.cs, row.ref))
		}
		return stats(la, sum(la)), stats(lr, sum(lr))
	}
	type tally struct {
		side benchSide
		p    *sdk.CallToolParams
		lat  []time.Duration
		wall time.Duration
		cpu  []time.Duration
	}
	ta := &tally{side: air, p: row.air, cpu: make([]time.Duration, len(air.procs))}
	tr := &tally{side: ref, p: row.ref, cpu: make([]time.Duration, len(ref.procs))}
	round := 10 * conc
	for i := 0; i*round < n; i++ {
		k := min(round, n-i*round)
		order := []*tally{ta, tr}
		if i%2 == 1 {
			order = []*tally{tr, ta}
		}
		for _, t := range order {
			start := time.Now()
			addCPU(t.cpu, t.side.procs, func() { t.lat = append(t.lat, callConcurrently(b, t.side.cs, t.p, conc, k)...) })
			t.wall += time.Since(start)
		}
	}
	result := func(t *tally) benchStats {
		s := stats(t.lat, t.wall)
		for _, c := range t.cpu {
			s.cpu = append(s.cpu, c/time.Duration(n))
		}
		return s
	}
	return result(ta), result(tr)
}

// timeCall makes one call and returns its latency; a failed call fails the benchmark.
func timeCall(b *testing.B, cs *sdk.ClientSession, p *sdk.CallToolParams) time.Duration {
	start := time.Now()
	r, err := cs.CallTool(context.Background(), p)
	d := time.Since(start)
	if err == nil && r.IsError {
		err = fmt.Errorf("error result: %s", text(r))
	}
	if err != nil {
		b.Errorf("%s: %v", p.Name, err)
	}
	return d
}

// callConcurrently makes n calls from conc goroutines and returns their latencies.
func callConcurrently(b *testing.B, cs *sdk.ClientSession, p *sdk.CallToolParams, conc, n int) []time.Duration {
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			// The go-sdk client writes the request's _meta into the params it is given: each
			// goroutine calls with params of its own.
			q := *p
			q.SetMeta(maps.Clone(p.GetMeta()))
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				lat[i] = timeCall(b, cs, &q)
			}
		})
	}
	wg.Wait()
	return lat
}

func stats(lat []time.Duration, wall time.Duration) benchStats {
	s := slices.Clone(lat)
	slices.Sort(s)
	pct := func(p int) time.Duration { return s[min(len(s)-1, len(s)*p/100)] }
	return benchStats{p50: pct(50), p99: pct(99), perSec: float64(len(s)) / wall.Seconds()}
}

func sum(d []time.Duration) time.Duration {
	var t time.Duration
	for _, x := range d {
		t += x
	}
	return t
}

func round(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func decodeStructured(r *sdk.CallToolResult, v any) error {
	if r.IsError {
		return fmt.Errorf("error result: %s", text(r))
	}
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
