package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// helperArg marks a re-execution of the test binary as one of the benchmark's children (see
// runChild).
const helperArg = "airlock-bench-child"

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == helperArg {
		os.Exit(runChild(os.Args[2]))
	}
	os.Exit(daemontest.Main(m).Run())
}

// runChild is a benchmark child. Modes:
//
//	echo  copies each stdin line to stdout: the bare stdio pipe baseline
//	mcp   an MCP server built with the official Go SDK on stdio, whose one tool,
//	      observe_desk_lamp, answers what go-lamp's observe answers
func runChild(mode string) int {
	switch mode {
	case "echo":
		in := bufio.NewReaderSize(os.Stdin, 1<<16)
		for {
			line, err := in.ReadSlice('\n')
			if err != nil {
				return 0
			}
			if _, err := os.Stdout.Write(line); err != nil {
				return 1
			}
		}
	case "mcp":
		return serveMCPLamp()
	}
	return 2
}

// lampState is go-lamp's observation, {"on", "brightness"}.
type lampState struct {
	On         bool `json:"on"`
	Brightness int  `json:"brightness"`
}

// serveMCPLamp serves the desk lamp's observation as an MCP tool, the way the SDK's typed
// tools are meant to be written: the output type gives the output schema, the structured
// content and its JSON text content.
func serveMCPLamp() int {
	state := lampState{Brightness: 60}
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-lamp", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "observe_desk_lamp", Description: "Observe the desk lamp: whether it is on, and its brightness."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, lampState, error) {
			return nil, state, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return 1
	}
	return 0
}

// BenchmarkObserveRoundTrip measures an observeCapability round trip (client → airlockd over
// its Unix socket → the go-lamp example adapter over stdio, and back) next to two baselines
// timed in the same run, interleaved call by call so that machine load affects all three
// alike:
//
//   - echo: a request-sized line through a child's stdio pipes and back, the least any
//     stdio adapter protocol can cost;
//   - mcp: a tools/call round trip with the official MCP Go SDK (CommandTransport client,
//     stdio server), to a child serving the same observation as a typed tool.
//
// It reports p50 and p99 of each, and the observe p50 (and p99) as a ratio to each baseline.
// The targets are ratio-echo-p50 ≤ 2.0 and ratio-mcp-p50 ≤ 0.333:
//
//	go test -run '^$' -bench ObserveRoundTrip -benchtime 5000x ./internal/bench/
func BenchmarkObserveRoundTrip(b *testing.B) {
	lamp := daemontest.Build(b, "./examples/adapters/go-lamp")
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()

	root := daemontest.ShortDir(b)
	d, err := daemon.Start(daemon.Config{SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state")})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Shutdown(ctx)
	lc := dialLine(b, filepath.Join(root, "run", "d.sock"))
	defer lc.nc.Close()
	registerLamp(b, lc, lamp)
	observeLine := []byte(`{"protocolVersion":"2.0","requestId":"o","operation":"observeCapability",` +
		`"payload":{"capabilityId":"desk_lamp"}}` + "\n")
	observe := func() {
		resp := lc.roundTrip(b, observeLine)
		if !bytes.Contains(resp, []byte(`"ok":true`)) {
			b.Fatalf("observeCapability: %s", resp)
		}
	}

	echoCmd := exec.Command(exe, helperArg, "echo")
	echoIn, err := echoCmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	echoOutPipe, err := echoCmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := echoCmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		echoIn.Close()
		echoCmd.Wait()
	}()
	echoOut := bufio.NewReader(echoOutPipe)
	// What the daemon writes to go-lamp for an observe, so the echo moves as many bytes.
	echoLine := []byte(`{"protocolVersion":1,"id":"1","method":"observe","capabilityId":"desk_lamp"}` + "\n")
	echo := func() {
		if _, err := echoIn.Write(echoLine); err != nil {
			b.Fatal(err)
		}
		if _, err := echoOut.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}

	// The two-hop baseline has the daemon's shape with none of its work: a Unix socket to a
	// relay that passes each line through a second echo child's pipes and back.
	relaySock := filepath.Join(root, "relay.sock")
	stopRelay := startRelay(b, exe, relaySock)
	defer stopRelay()
	rc := dialLine(b, relaySock)
	defer rc.nc.Close()
	relay := func() {
		if resp := rc.roundTrip(b, echoLine); len(resp) == 0 {
			b.Fatal("relay: empty answer")
		}
	}

	mc := mcp.NewClient(&mcp.Implementation{Name: "airlock-bench", Version: "1"}, nil)
	cs, err := mc.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(exe, helperArg, "mcp")}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	call := &mcp.CallToolParams{Name: "observe_desk_lamp", Arguments: map[string]any{}}
	mcpCall := func() {
		res, err := cs.CallTool(ctx, call)
		if err != nil {
			b.Fatal(err)
		}
		if res.IsError || res.StructuredContent == nil {
			b.Fatalf("tools/call failed: %+v", res)
		}
	}

	for range 300 { // warm up all four
		observe()
		echo()
		relay()
		mcpCall()
	}
	obs, bare, viaMCP := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	hops := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		observe()
		t1 := time.Now()
		echo()
		t2 := time.Now()
		mcpCall()
		t3 := time.Now()
		relay()
		t4 := time.Now()
		obs, bare, viaMCP = append(obs, t1.Sub(t0)), append(bare, t2.Sub(t1)), append(viaMCP, t3.Sub(t2))
		hops = append(hops, t4.Sub(t3))
	}
	b.StopTimer()

	o50, o99 := percentile(obs, 50), percentile(obs, 99)
	e50, e99 := percentile(bare, 50), percentile(bare, 99)
	m50, m99 := percentile(viaMCP, 50), percentile(viaMCP, 99)
	b.ReportMetric(o50, "observe-p50-ns")
	b.ReportMetric(o99, "observe-p99-ns")
	b.ReportMetric(e50, "echo-p50-ns")
	b.ReportMetric(e99, "echo-p99-ns")
	b.ReportMetric(m50, "mcp-p50-ns")
	b.ReportMetric(m99, "mcp-p99-ns")
	b.ReportMetric(o50/e50, "ratio-echo-p50")
	b.ReportMetric(o99/e99, "ratio-echo-p99")
	h50 := percentile(hops, 50)
	b.ReportMetric(h50, "twohop-p50-ns")
	b.ReportMetric(o50/h50, "ratio-twohop-p50")
	b.ReportMetric(o50/m50, "ratio-mcp-p50")
	b.ReportMetric(o99/m99, "ratio-mcp-p99")
}

// registerLamp registers go-lamp as "lamp", retrying while the daemon is still recovering.
func registerLamp(b *testing.B, lc *lineConn, command string) {
	payload, err := json.Marshal(map[string]any{"name": "lamp", "command": command})
	if err != nil {
		b.Fatal(err)
	}
	line := []byte(`{"protocolVersion":"2.0","requestId":"r","operation":"registerAdapter","payload":` + string(payload) + "}\n")
	for deadline := time.Now().Add(10 * time.Second); ; {
		var resp struct {
			OK    bool `json:"ok"`
			Error *struct {
				Code      string `json:"code"`
				Retryable bool   `json:"retryable"`
			} `json:"error"`
		}
		raw := lc.roundTrip(b, line)
		if err := json.Unmarshal(raw, &resp); err != nil {
			b.Fatalf("registerAdapter: %v: %s", err, raw)
		}
		if resp.OK {
			return
		}
		if resp.Error == nil || !resp.Error.Retryable || time.Now().After(deadline) {
			b.Fatalf("registerAdapter: %s", raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lineConn is a minimal NDJSON client: one line out, one line back.
type lineConn struct {
	nc net.Conn
	br *bufio.Reader
}

func dialLine(b *testing.B, socket string) *lineConn {
	nc, err := net.Dial("unix", socket)
	if err != nil {
		b.Fatal(err)
	}
	return &lineConn{nc: nc, br: bufio.NewReaderSize(nc, 1<<16)}
}

// roundTrip writes req and returns the answer line, valid until the next call.
func (c *lineConn) roundTrip(b *testing.B, req []byte) []byte {
	if _, err := c.nc.Write(req); err != nil {
		b.Fatal(err)
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		b.Fatal(err)
	}
	return line
}

// percentile returns the p-th percentile of lat in nanoseconds.
func percentile(lat []time.Duration, p int) float64 {
	s := slices.Clone(lat)
	slices.Sort(s)
	return float64(s[(len(s)-1)*p/100].Nanoseconds())
}

// startRelay listens on socket and serves one connection at a time: each line goes through an
// echo child's stdin and stdout and back. It returns the function that stops it.
func startRelay(b *testing.B, exe, socket string) func() {
	child := exec.Command(exe, helperArg, "echo")
	in, err := child.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := child.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	out := bufio.NewReader(outPipe)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadSlice('\n')
				if err != nil {
					break
				}
				if _, err := in.Write(line); err != nil {
					break
				}
				back, err := out.ReadSlice('\n')
				if err != nil {
					break
				}
				if _, err := c.Write(back); err != nil {
					break
				}
			}
			c.Close()
		}
	}()
	return func() {
		ln.Close()
		<-done
		in.Close()
		child.Wait()
	}
}
