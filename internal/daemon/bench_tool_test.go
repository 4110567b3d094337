package daemon

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// BenchmarkInvokeTool measures an invokeTool round trip (client → airlockd → an adapter that
// answers at once) next to two chained bare Unix-socket echo hops (client → relay → echo),
// interleaved in the same run, and the throughput of 1 and 64 concurrent clients:
//
//	go test -run '^$' -bench InvokeTool -benchtime 20000x ./internal/daemon/
func BenchmarkInvokeTool(b *testing.B) {
	root := daemontest.ShortDir(b)
	stopEcho := startEcho(b, filepath.Join(root, "echo.sock"))
	defer stopEcho()
	stopRelay := startRelay(b, filepath.Join(root, "relay.sock"), filepath.Join(root, "echo.sock"))
	defer stopRelay()
	adapterSock := filepath.Join(root, "fs.sock")
	stopAdapter := startFastAdapter(b, adapterSock)
	defer stopAdapter()

	// 64 clients of this process: the per-process share is raised to 64 (benchLimits).
	d, err := Start(Config{SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state"),
		Limits: benchLimits(64)})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	waitReady(b, d)
	openToolSession(b, d, adapterSock)

	invoke := statLine
	echo, daemon := interleaved(b, filepath.Join(root, "relay.sock"), d.cfg.SocketPath, invoke, b.N)
	e50, e99 := percentile(echo, 50), percentile(echo, 99)
	d50, d99 := percentile(daemon, 50), percentile(daemon, 99)
	b.ReportMetric(float64(e50.Nanoseconds()), "twohop-p50-ns")
	b.ReportMetric(float64(e99.Nanoseconds()), "twohop-p99-ns")
	b.ReportMetric(float64(d50.Nanoseconds()), "invoke-p50-ns")
	b.ReportMetric(float64(d99.Nanoseconds()), "invoke-p99-ns")
	b.ReportMetric(float64(d50)/float64(e50), "ratio-p50")
	for _, clients := range []int{1, 64} {
		// 64 clients take every connection the daemon serves: the connections closed before
		// must be gone on its side too, or one of them is refused for capacity.
		waitNoConns(b, d)
		b.ReportMetric(throughput(b, d.cfg.SocketPath, clients, max(b.N, throughputCalls())), fmt.Sprintf("calls/s-%dclients", clients))
	}
}

// throughputCalls is the least number of calls a throughput figure is measured over: 20000,
// or 640 with -short (make bench-smoke, which only checks that the benchmark runs).
func throughputCalls() int {
	if testing.Short() {
		return 640
	}
	return 20000
}

// waitNoConns waits until the daemon has let go of every client connection.
func waitNoConns(b *testing.B, d *Daemon) {
	for deadline := time.Now().Add(10 * time.Second); ; {
		d.srv.mu.Lock()
		n := len(d.srv.conns)
		d.srv.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("daemon still holds %d connections", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// throughput runs total invokeTool calls over clients connections, each client one call at a
// time with its own call ids, and returns calls per second.
func throughput(b *testing.B, socket string, clients, total int) float64 {
	per := total / clients
	var wg sync.WaitGroup
	start := time.Now()
	for i := range clients {
		wg.Go(func() {
			c, err := dialLineErr(socket)
			if err != nil {
				b.Error(err)
				return
			}
			defer c.close()
			for j := range per {
				line := fmt.Sprintf(`{"protocolVersion":"2.0","requestId":"r%d","operation":"invokeTool","sessionId":"bench","generation":1,`+
					`"payload":{"toolCallId":"c%d-%d","operation":"fs.stat","arguments":{"path":"."}}}`+"\n", j, i, j)
				if _, err := c.roundTripErr([]byte(line)); err != nil {
					b.Errorf("client %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return float64(per*clients) / time.Since(start).Seconds()
}

// statLine is one invokeTool of fs.stat on the session openToolSession opens: the call the
// invokeTool benchmarks time.
var statLine = []byte(`{"protocolVersion":"2.0","requestId":"b","operation":"invokeTool","sessionId":"bench","generation":1,` +
	`"payload":{"toolCallId":"c1","operation":"fs.stat","arguments":{"path":"."}}}` + "\n")

// startToolBench starts a daemon of cfg in its own directory, its socket, state and limits
// (64 clients of this process) filled in, with its own fast adapter and the bench session
// open; both stop when b ends.
func startToolBench(b *testing.B, cfg Config) *Daemon {
	root := daemontest.ShortDir(b)
	adapterSock := filepath.Join(root, "fs.sock")
	b.Cleanup(startFastAdapter(b, adapterSock))
	cfg.SocketPath, cfg.StateDir, cfg.Limits = filepath.Join(root, "run", "d.sock"), filepath.Join(root, "state"), benchLimits(64)
	d, err := Start(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Shutdown(context.Background()) })
	waitReady(b, d)
	openToolSession(b, d, adapterSock)
	return d
}

func openToolSession(b testing.TB, d *Daemon, adapterSock string) {
	openToolSessionWith(b, d, adapterSock, b.TempDir(), "fs.stat")
}

// openToolSessionWith opens session "bench", generation 1, in cwd with the adapter at
// adapterSock granted ops.
func openToolSessionWith(b testing.TB, d *Daemon, adapterSock, cwd string, ops ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, d.cfg.SocketPath)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	h := make([]byte, 32)
	rand.Read(h)
	gen := int64(1)
	r, err := c.Call(ctx, client.Command{Operation: "open", SessionID: "bench", Generation: &gen, Payload: map[string]any{
		"cwd": cwd, "session": map[string]any{"mode": "memory"},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none", "contextFiles": "none",
			"tools": map[string]any{"mode": "host-adapter", "descriptor": map[string]any{
				"protocolVersion": "1.0", "adapterId": "bench", "adapterVersion": "1.0.0",
				"endpoint":   map[string]any{"transport": "unix", "path": adapterSock},
				"binding":    map[string]any{"hostInstanceId": d.hostID, "sessionId": "bench", "generation": 1, "capabilityHandle": base64.RawURLEncoding.EncodeToString(h)},
				"operations": ops,
				"limits": map[string]any{"maxRequestBytes": 1048576, "maxResponseBytes": 1048576, "maxConcurrentRequests": 64,
					"maxQueuedRequests": 256, "requestTimeoutMs": 30000, "maxIdempotencyKeys": 4096, "idempotencyTtlMs": 3600000},
			}}},
	}})
	if err := callErr(r, err); err != nil {
		b.Fatalf("open: %v", err)
	}
}

// startFastAdapter serves bind and fs.stat as fast as a small Go adapter can.
func startFastAdapter(b *testing.B, socket string) func() {
	ln, err := net.Listen("unix", socket)
	if err != nil {
		b.Fatal(err)
	}
	os.Chmod(socket, 0o600)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { serveFast(c) })
		}
	})
	return func() { ln.Close(); wg.Wait() }
}

// serveFast is a correct adapter for one binding that spends as little as it can per frame. The
// bind frame is decoded with encoding/json, once, and fixes the identity; every later frame is
// split into its top-level members in one pass, must carry that identity, and is answered by
// appending the echoed members to the identity's encoding: a result for invoke, revoked for
// revoke. Frames of another binding, or that are not objects, end the connection.
func serveFast(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return
	}
	var bind struct {
		ProtocolVersion  string          `json:"protocolVersion"`
		Kind             string          `json:"kind"`
		AdapterID        string          `json:"adapterId"`
		AdapterVersion   string          `json:"adapterVersion"`
		HostInstanceID   string          `json:"hostInstanceId"`
		SessionID        string          `json:"sessionId"`
		Generation       int64           `json:"generation"`
		CapabilityHandle string          `json:"capabilityHandle"`
		Operations       json.RawMessage `json:"operations"`
		Limits           json.RawMessage `json:"limits"`
	}
	if json.Unmarshal(line, &bind) != nil || bind.Kind != "bind" {
		return
	}
	// want holds the identity members as every frame of the binding must carry them.
	want := map[string]string{}
	for k, v := range map[string]any{"protocolVersion": bind.ProtocolVersion, "adapterId": bind.AdapterID,
		"adapterVersion": bind.AdapterVersion, "hostInstanceId": bind.HostInstanceID, "sessionId": bind.SessionID, "generation": bind.Generation} {
		enc, _ := json.Marshal(v)
		want[k] = string(enc)
	}
	identity := fmt.Sprintf(`{"protocolVersion":%s,"kind":"%%s","adapterId":%s,"adapterVersion":%s,"hostInstanceId":%s,"sessionId":%s,"generation":%s`,
		want["protocolVersion"], want["adapterId"], want["adapterVersion"], want["hostInstanceId"], want["sessionId"], want["generation"])
	bound := fmt.Sprintf(identity, "bound") + `,"operations":` + string(bind.Operations) + `,"limits":` + string(bind.Limits) + "}\n"
	result, revoked := []byte(fmt.Sprintf(identity, "result")), fmt.Sprintf(identity, "revoked")+"}\n"
	var mu sync.Mutex
	write := func(b []byte) {
		mu.Lock()
		c.Write(b)
		mu.Unlock()
	}
	write([]byte(bound))
	var out []byte
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		var kind, requestID, key, op []byte
		seen := 0
		ok := eachMember(line, func(k []byte, v []byte) bool {
			switch string(k) {
			case "kind":
				kind = v
			case "requestId":
				requestID = v
			case "idempotencyKey":
				key = v
			case "operation":
				op = v
			default:
				if w, ok := want[string(k)]; ok {
					if string(v) != w {
						return false
					}
					seen++
				}
			}
			return true
		})
		if !ok || seen != len(want) {
			return
		}
		switch string(kind) {
		case `"invoke"`:
			out = append(out[:0], result...)
			out = append(out, `,"requestId":`...)
			out = append(out, requestID...)
			out = append(out, `,"idempotencyKey":`...)
			out = append(out, key...)
			out = append(out, `,"operation":`...)
			out = append(out, op...)
			out = append(out, `,"ok":true,"data":{"type":"directory","size":0}}`+"\n"...)
			write(out)
		case `"revoke"`:
			write([]byte(revoked))
		}
	}
}

// eachMember calls f with the name and the raw JSON value of each top-level member of the
// object in line, in order, and reports whether the object was well-formed and f accepted every
// member. It checks the structure it walks (quotes, escapes, nesting, duplicate names); it does
// not parse values.
func eachMember(line []byte, f func(name, value []byte) bool) bool {
	i := 0
	skipSpace := func() {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n') {
			i++
		}
	}
	str := func() bool { // the string at line[i]
		if i >= len(line) || line[i] != '"' {
			return false
		}
		for i++; i < len(line); i++ {
			switch line[i] {
			case '\\':
				i++
			case '"':
				i++
				return true
			}
		}
		return false
	}
	value := func() bool { // the value at line[i]
		depth := 0
		for i < len(line) {
			switch line[i] {
			case '"':
				if !str() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth == 0 {
					return true
				}
				depth--
			case ',':
				if depth == 0 {
					return true
				}
			}
			i++
		}
		return false
	}
	var names [16][]byte
	seen := names[:0]
	skipSpace()
	if i >= len(line) || line[i] != '{' {
		return false
	}
	i++
	for {
		skipSpace()
		start := i
		if !str() {
			return false
		}
		name := line[start+1 : i-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			var s string
			if json.Unmarshal(line[start:i], &s) != nil {
				return false
			}
			name = []byte(s)
		}
		if slices.ContainsFunc(seen, func(n []byte) bool { return bytes.Equal(n, name) }) {
			return false
		}
		seen = append(seen, name)
		skipSpace()
		if i >= len(line) || line[i] != ':' {
			return false
		}
		i++
		skipSpace()
		start = i
		if !value() || !f(name, bytes.TrimRight(line[start:i], " \t\r\n")) {
			return false
		}
		switch {
		case i < len(line) && line[i] == ',':
			i++
		case i < len(line) && line[i] == '}':
			return true
		default:
			return false
		}
	}
}

// startRelay forwards each line to the echo server on its own upstream connection and
// returns the answer: the two-hop baseline.
func startRelay(b *testing.B, socket, upstream string) func() {
	ln, err := net.Listen("unix", socket)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				up, err := net.Dial("unix", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				br, ubr := bufio.NewReader(c), bufio.NewReader(up)
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					if _, err := up.Write(line); err != nil {
						return
					}
					answer, err := ubr.ReadSlice('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
				}
			})
		}
	})
	return func() { ln.Close(); wg.Wait() }
}
