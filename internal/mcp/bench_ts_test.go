package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// tsRow is one row's figures as bench.mjs prints them (microseconds, calls per second).
type tsRow struct {
	Event   string  `json:"event"`
	Row     string  `json:"row"`
	Conc    int     `json:"conc"`
	Air     tsStats `json:"air"`
	Ref     tsStats `json:"ref"`
	Message string  `json:"message"`
}

type tsStats struct {
	P50    float64 `json:"p50"`
	P99    float64 `json:"p99"`
	PerSec float64 `json:"perSec"`
}

// BenchmarkMCPFilesystemTS is make bench-mcp-ts: make bench-mcp's rows, a listing of 20
// entries, and a 4 KiB write and edit (rows the issue measured with this client), with the
// TypeScript SDK's client (@modelcontextprotocol/sdk 1.x, the one most Node.js agents embed,
// driven by testdata/clients/bench.mjs) in the go-sdk client's place. Each client lists the tools
// first, as an agent does, and so checks every structuredContent against its tool's
// outputSchema. b.N calls per server, row and concurrency (1 and 16), the two servers
// alternating as in make bench-mcp. Run it as
//
//	go test -run '^$' -bench '^BenchmarkMCPFilesystemTS$' -benchtime 300x ./internal/mcp/
func BenchmarkMCPFilesystemTS(b *testing.B) {
	bin := npmBin(b, "mcp-server-filesystem")
	npmPackage(b, "@modelcontextprotocol/sdk")
	e, _, dir := startBenchSession(b)

	type call struct {
		Name      string         `json:"name"`
		Arguments map[string]any `json:"arguments"`
	}
	type row struct {
		Name string `json:"name"`
		Air  any    `json:"air"` // a call, or calls made in turn
		Ref  any    `json:"ref"`
		Conc []int  `json:"conc,omitempty"`
	}
	var rows []row
	for _, r := range benchRows(dir) {
		rows = append(rows, row{Name: r.name, Air: call{r.air.Name, r.air.Arguments.(map[string]any)}, Ref: call{r.ref.Name, r.ref.Arguments.(map[string]any)}})
	}
	// A listing of a small directory, as an agent lists most, beside the 1,000 entries.
	if err := os.MkdirAll(filepath.Join(dir, "few"), 0o700); err != nil {
		b.Fatal(err)
	}
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(dir, "few", fmt.Sprintf("f%02d.txt", i)), []byte("x\n"), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	rows = append(rows, row{Name: "list_20",
		Air: call{"fs_list", map[string]any{"path": "few"}},
		Ref: call{"list_directory", map[string]any{"path": filepath.Join(dir, "few")}}})
	// The writes the issue measured with this client: a 4 KiB file replaced, and one exact
	// edit of a 4 KiB file, then the edit that undoes it (at 1 call only: two edits of one
	// file at once would refuse each other). Each server has files of its own.
	content := strings.Repeat("0123456789abcdef", benchSmall/16)
	edited := content[:benchSmall/2] + "alpha" + content[benchSmall/2:]
	for _, f := range []string{"w-air.txt", "w-ref.txt", "e-air.txt", "e-ref.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(edited), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	edit := func(name, path, from, to string) call {
		return call{name, map[string]any{"path": path, "edits": []map[string]string{{"oldText": from, "newText": to}}}}
	}
	rows = append(rows,
		row{Name: "write_4KiB",
			Air: call{"fs_write", map[string]any{"path": "w-air.txt", "content": "{seq}" + content, "overwrite": true}},
			Ref: call{"write_file", map[string]any{"path": filepath.Join(dir, "w-ref.txt"), "content": "{seq}" + content}}},
		row{Name: "edit_4KiB",
			Air:  []call{edit("fs_edit", "e-air.txt", "alpha", "omega"), edit("fs_edit", "e-air.txt", "omega", "alpha")},
			Ref:  []call{edit("edit_file", filepath.Join(dir, "e-ref.txt"), "alpha", "omega"), edit("edit_file", filepath.Join(dir, "e-ref.txt"), "omega", "alpha")},
			Conc: []int{1}})
	concs := []int{1, 16}
	warmup := benchWarmup
	if testing.Short() {
		warmup = 2 // make bench-smoke only checks that the rows run
	}
	type server struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
	}
	opts := map[string]any{
		"servers": map[string]server{
			"air": {daemontest.Binary(b, "airlock"), []string{"--socket", e.d.Socket, "mcp", "--session", "bench", "--generation", "1"}},
			"ref": {filepath.Join(bin, "mcp-server-filesystem"), []string{dir}},
		},
		"rows":   rows,
		"calls":  b.N,
		"warmup": warmup,
		"conc":   concs,
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd, lines, stderr := nodeScript(b, ctx, "bench.mjs", opts)
	b.ResetTimer()
	var results []tsRow
	done := false
	for line := range lines {
		var r tsRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			b.Errorf("bench.mjs printed %q", line)
			continue
		}
		switch r.Event {
		case "row":
			results = append(results, r)
		case "done":
			done = true
		default:
			b.Errorf("bench.mjs: %s", r.Message)
		}
	}
	if err := cmd.Wait(); err != nil || !done {
		b.Fatalf("bench.mjs: %v (done %v)\n%s", err, done, stderr.String())
	}
	b.StopTimer()

	var sb strings.Builder
	fmt.Fprintf(&sb, "\nairlock vs @modelcontextprotocol/server-filesystem, the TypeScript SDK's client (1.x) on stdio, %d calls a row\n", b.N)
	fmt.Fprintf(&sb, "%-15s %4s | %10s %10s %9s | %10s %10s %9s | %s\n", "row", "conc",
		"air p50", "air p99", "air c/s", "ref p50", "ref p99", "ref c/s", "ref/air p50")
	minRatio := 0.0
	for _, r := range results {
		ratio := r.Ref.P50 / max(r.Air.P50, 1)
		if minRatio == 0 || ratio < minRatio {
			minRatio = ratio
		}
		µs := func(v float64) string { return round(time.Duration(v * float64(time.Microsecond))) }
		fmt.Fprintf(&sb, "%-15s %4d | %10s %10s %9.0f | %10s %10s %9.0f | %.2f×\n", r.Row, r.Conc,
			µs(r.Air.P50), µs(r.Air.P99), r.Air.PerSec, µs(r.Ref.P50), µs(r.Ref.P99), r.Ref.PerSec, ratio)
	}
	want := 0 // a result per row and concurrency
	for _, r := range rows {
		if r.Conc == nil {
			r.Conc = concs
		}
		want += len(r.Conc)
	}
	if len(results) != want {
		b.Fatalf("bench.mjs measured %d rows, want %d", len(results), want)
	}
	fmt.Fprintf(&sb, "smallest ratio %.2f×\n", minRatio)
	fmt.Print(sb.String())
	b.ReportMetric(minRatio, "min-ratio-p50")
}
