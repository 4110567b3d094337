package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// clientFloor measures what one answer costs the go-sdk client itself: n tools/call calls
// answered, at once and always with the answer res, by a stand-in server on in-process
// pipes that spends nothing on them (the answer is encoded once, beforehand). Its p50 is the
// part of a server's p50 in make bench-mcp that no server can save: the client receiving and
// decoding what the server sent.
func clientFloor(b *testing.B, res *sdk.CallToolResult, n int) time.Duration {
	b.Helper()
	result, err := json.Marshal(res)
	if err != nil {
		b.Fatal(err)
	}
	cr, sw := io.Pipe() // the stand-in's answers, to the client
	sr, cw := io.Pipe() // the client's requests, to the stand-in
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sw.Close()
		serveStandIn(sr, sw, result)
	}()
	defer func() { cw.Close(); sr.Close(); <-done }()
	return floorCalls(b, &sdk.IOTransport{Reader: cr, Writer: cw}, n, nil)
}

// processFloor is clientFloor with the stand-in a process of its own on real pipes, as a
// server is: what the client, the stdio between two processes and the wake-ups of a server
// process spend on one answer, when the server itself spends nothing. It is the floor of any
// single-process server written in Go; a server that asks another process (airlockd asks
// airlock-fs) adds that process's hops to it. between, when set, runs (untimed) before each
// call: the other server's call, so that the stand-in waits between calls as each server
// does in make bench-mcp's alternating rows, and pays the same wake-ups.
func processFloor(b *testing.B, res *sdk.CallToolResult, n int, between func()) time.Duration {
	b.Helper()
	return floorCalls(b, &sdk.CommandTransport{Command: standInCommand(b, res)}, n, between)
}

// processFloorCPU is processFloor at conc calls at once: n calls, in rounds of 10*conc made by
// conc goroutines (as make bench-mcp's rows at 16), each round after between's. It returns
// what the stand-in process and this one (the go-sdk client) spent per call over the rounds:
// a server process that does nothing, in the place of airlock mcp.
func processFloorCPU(b *testing.B, res *sdk.CallToolResult, conc, n int, between func()) (standIn, client time.Duration) {
	b.Helper()
	cmd := standInCommand(b, res)
	cs := floorClient(b, &sdk.CommandTransport{Command: cmd})
	defer cs.Close()
	procs := []benchProc{{"stand-in", cmd.Process.Pid}, {"client", 0}}
	p := &sdk.CallToolParams{Name: "t", Arguments: map[string]any{}}
	cpu := make([]time.Duration, len(procs))
	for done := 0; done < n; {
		k := min(10*conc, n-done)
		between()
		addCPU(cpu, procs, func() { callConcurrently(b, cs, p, conc, k) })
		done += k
	}
	return cpu[0] / time.Duration(n), cpu[1] / time.Duration(n)
}

// standInCommand returns the command that starts this test binary as a stand-in server
// answering every tools/call with res.
func standInCommand(b *testing.B, res *sdk.CallToolResult) *exec.Cmd {
	b.Helper()
	result, err := json.Marshal(res)
	if err != nil {
		b.Fatal(err)
	}
	answer := filepath.Join(b.TempDir(), "answer.json")
	if err := os.WriteFile(answer, result, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), standInEnv+"="+answer)
	cmd.Stderr = os.Stderr
	return cmd
}

// standInEnv names the answer file of a test binary started as processFloor's stand-in
// (TestMain).
const standInEnv = "AIRLOCK_BENCH_STANDIN_ANSWER"

// runStandIn serves stdin as processFloor's stand-in when the test binary was started as one,
// and reports whether it was.
func runStandIn() bool {
	path := os.Getenv(standInEnv)
	if path == "" {
		return false
	}
	result, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	serveStandIn(os.Stdin, os.Stdout, result)
	return true
}

// serveStandIn answers every request read from r at once: initialize as a server with
// tools, tools/call with result, anything else with an empty result. It stops at the end of
// r, or at a line over the default line bound.
func serveStandIn(r io.Reader, w io.Writer, result []byte) {
	lines := ndjson.NewReader(r, 0)
	for {
		line, err := lines.Next()
		if err != nil {
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &req) != nil || req.ID == nil {
			continue // a notification
		}
		var answer json.RawMessage
		switch req.Method {
		case "initialize":
			answer, _ = json.Marshal(map[string]any{"protocolVersion": req.Params.ProtocolVersion,
				"capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "floor", "version": "1"}})
		case "tools/call":
			answer = result
		default:
			answer = json.RawMessage(`{}`)
		}
		out := append(append(append(append([]byte(`{"jsonrpc":"2.0","id":`), req.ID...), `,"result":`...), answer...), "}\n"...)
		if _, err := w.Write(out); err != nil {
			return
		}
	}
}

// floorCalls connects a go-sdk client over t and returns the p50 of n tools/call calls, after
// ten to warm up, each after between when it is set.
func floorCalls(b *testing.B, t sdk.Transport, n int, between func()) time.Duration {
	b.Helper()
	cs := floorClient(b, t)
	defer cs.Close()
	p := &sdk.CallToolParams{Name: "t", Arguments: map[string]any{}}
	lat := make([]time.Duration, 0, n)
	for range n {
		if between != nil {
			between()
		}
		lat = append(lat, timeCall(b, cs, p))
	}
	return stats(lat, sum(lat)).p50
}

// floorClient connects a go-sdk client over t to a stand-in and makes ten calls to warm up.
func floorClient(b *testing.B, t sdk.Transport) *sdk.ClientSession {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := sdk.NewClient(&sdk.Implementation{Name: "bench-mcp", Version: "1"}, &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}})
	cs, err := cl.Connect(ctx, t, nil)
	if err != nil {
		b.Fatalf("connect to the stand-in: %v", err)
	}
	p := &sdk.CallToolParams{Name: "t", Arguments: map[string]any{}}
	for range 10 {
		if _, err := cs.CallTool(ctx, p); err != nil {
			cs.Close()
			b.Fatal(err)
		}
	}
	return cs
}
