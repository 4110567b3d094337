package daemon

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
)

// BenchmarkInvokeTool measures an invokeTool round trip (client → airlockd → an adapter that
// answers at once) next to two chained bare Unix-socket echo hops (client → relay → echo),
// interleaved in the same run, and the throughput of 1 and 64 concurrent clients:
//
//	go test -run '^$' -bench InvokeTool -benchtime 20000x ./internal/daemon/
func BenchmarkInvokeTool(b *testing.B) {
	root := shortDirB2(b)
	stopEcho := startEcho(b, filepath.Join(root, "echo.sock"))
	defer stopEcho()
	stopRelay := startRelay(b, filepath.Join(root, "relay.sock"), filepath.Join(root, "echo.sock"))
	defer stopRelay()
	adapterSock := filepath.Join(root, "fs.sock")
	stopAdapter := startFastAdapter(b, adapterSock)
	defer stopAdapter()

	d, err := Start(Config{SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state")})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	waitReady(b, d)
	openToolSession(b, d, adapterSock)

	invoke := []byte(`{"protocolVersion":"2.0","requestId":"b","operation":"invokeTool","sessionId":"bench","generation":1,` +
		`"payload":{"toolCallId":"c1","operation":"fs.stat","arguments":{"path":"."}}}` + "\n")
	echo, daemon := interleaved(b, filepath.Join(root, "relay.sock"), d.cfg.SocketPath, invoke, b.N)
	e50, e99 := percentile(echo, 50), percentile(echo, 99)
	d50, d99 := percentile(daemon, 50), percentile(daemon, 99)
	b.ReportMetric(float64(e50.Nanoseconds()), "twohop-p50-ns")
	b.ReportMetric(float64(e99.Nanoseconds()), "twohop-p99-ns")
	b.ReportMetric(float64(d50.Nanoseconds()), "invoke-p50-ns")
	b.ReportMetric(float64(d99.Nanoseconds()), "invoke-p99-ns")
	b.ReportMetric(float64(d50)/float64(e50), "ratio-p50")
	for _, clients := range []int{1, 64} {
		b.ReportMetric(throughput(b, d.cfg.SocketPath, clients, max(b.N, 20000)), fmt.Sprintf("calls/s-%dclients", clients))
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
			c := dialLine(b, socket)
			defer c.close()
			for j := range per {
				line := fmt.Sprintf(`{"protocolVersion":"2.0","requestId":"r%d","operation":"invokeTool","sessionId":"bench","generation":1,`+
					`"payload":{"toolCallId":"c%d-%d","operation":"fs.stat","arguments":{"path":"."}}}`+"\n", j, i, j)
				c.roundTrip(b, []byte(line))
			}
		})
	}
	wg.Wait()
	return float64(per*clients) / time.Since(start).Seconds()
}

func openToolSession(b *testing.B, d *Daemon, adapterSock string) {
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
	cwd := b.TempDir()
	r, err := c.Call(ctx, client.Command{Operation: "open", SessionID: "bench", Generation: &gen, Payload: map[string]any{
		"cwd": cwd, "session": map[string]any{"mode": "memory"},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none", "contextFiles": "none",
			"tools": map[string]any{"mode": "host-adapter", "descriptor": map[string]any{
				"protocolVersion": "1.0", "adapterId": "bench", "adapterVersion": "1.0.0",
				"endpoint":   map[string]any{"transport": "unix", "path": adapterSock},
				"binding":    map[string]any{"hostInstanceId": d.hostID, "sessionId": "bench", "generation": 1, "capabilityHandle": base64.RawURLEncoding.EncodeToString(h)},
				"operations": []string{"fs.stat"},
				"limits": map[string]any{"maxRequestBytes": 1048576, "maxResponseBytes": 1048576, "maxConcurrentRequests": 64,
					"maxQueuedRequests": 256, "requestTimeoutMs": 30000, "maxIdempotencyKeys": 4096, "idempotencyTtlMs": 3600000},
			}}},
	}})
	if err != nil || !r.OK {
		b.Fatalf("open: %v %v", err, r.Err())
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

func serveFast(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	var mu sync.Mutex
	type frame struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Kind            string          `json:"kind"`
		AdapterID       string          `json:"adapterId"`
		AdapterVersion  string          `json:"adapterVersion"`
		HostInstanceID  string          `json:"hostInstanceId"`
		SessionID       string          `json:"sessionId"`
		Generation      int64           `json:"generation"`
		Operations      json.RawMessage `json:"operations,omitempty"`
		Limits          json.RawMessage `json:"limits,omitempty"`
		RequestID       string          `json:"requestId,omitempty"`
		IdempotencyKey  string          `json:"idempotencyKey,omitempty"`
		Operation       string          `json:"operation,omitempty"`
		OK              *bool           `json:"ok,omitempty"`
		Data            json.RawMessage `json:"data,omitempty"`
	}
	yes := true
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		var in struct {
			frame
			CapabilityHandle string          `json:"capabilityHandle"`
			Payload          json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(line, &in) != nil {
			return
		}
		out := in.frame
		switch in.Kind {
		case "bind":
			out.Kind = "bound"
		case "invoke":
			out.Kind, out.OK, out.Data = "result", &yes, json.RawMessage(`{"type":"directory","size":0}`)
		case "revoke":
			out = frame{ProtocolVersion: in.ProtocolVersion, Kind: "revoked", AdapterID: in.AdapterID, AdapterVersion: in.AdapterVersion,
				HostInstanceID: in.HostInstanceID, SessionID: in.SessionID, Generation: in.Generation}
		default:
			continue
		}
		resp, _ := json.Marshal(out)
		mu.Lock()
		c.Write(append(resp, '\n'))
		mu.Unlock()
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

func shortDirB2(b *testing.B) string {
	d, err := os.MkdirTemp("/tmp", "alb-")
	if err != nil {
		b.Fatal(err)
	}
	os.Chmod(d, 0o700)
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}
