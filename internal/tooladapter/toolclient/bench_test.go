package toolclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

// echoServer is a bare Unix-socket line echo: the floor any framed round trip is measured
// against.
func echoServer(b *testing.B) string {
	sock := filepath.Join(shortRoot(b), "echo.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() {
				br := bufio.NewReader(nc)
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					if _, err := nc.Write(line); err != nil {
						return
					}
				}
			})
		}
	})
	b.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return sock
}

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(float64(len(s))*p))])
}

// fastAdapter is a minimal adapter for benchmarks: it binds, then answers every invoke at
// once with a fixed fs.stat result, pulling the ids out of the frame with a cheap scan, so that
// the benchmark measures the client rather than the test harness's strict decoding.
func fastAdapter(b *testing.B, d *tooladapter.Descriptor) {
	ln, err := net.Listen("unix", d.Endpoint.Path)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Chmod(d.Endpoint.Path, 0o600); err != nil {
		b.Fatal(err)
	}
	bound, _ := marshalFrame(d.BoundFrame())
	id, _ := json.Marshal(d.Identity())
	prefix := `{"protocolVersion":"1.0","kind":"result",` + string(id[1:len(id)-1])
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() {
				br := bufio.NewReaderSize(nc, 64<<10)
				bw := bufio.NewWriter(nc)
				var out []byte
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					if bytes.Contains(line, []byte(`"kind":"bind"`)) {
						_, _ = nc.Write(bound)
						continue
					}
					if !bytes.Contains(line, []byte(`"kind":"invoke"`)) {
						continue
					}
					out = append(out[:0], prefix...)
					out = append(out, `,"requestId":`...)
					out = append(out, jsonMember(line, `"requestId":`)...)
					out = append(out, `,"idempotencyKey":`...)
					out = append(out, jsonMember(line, `"idempotencyKey":`)...)
					out = append(out, `,"operation":"fs.stat","ok":true,"data":{"type":"file","size":1}}`+"\n"...)
					_, _ = bw.Write(out)
					// Flush unless another whole line is already buffered: the next read
					// must not block with answers held back.
					if next, _ := br.Peek(br.Buffered()); bytes.IndexByte(next, '\n') < 0 {
						_ = bw.Flush()
					}
				}
			})
		}
	})
	b.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// jsonMember returns the JSON string value after key in line, quotes included.
func jsonMember(line []byte, key string) []byte {
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return []byte(`""`)
	}
	v := line[i+len(key):]
	j := bytes.IndexByte(v[1:], '"')
	return v[:j+2]
}

// BenchmarkInvoke measures an Invoke round trip to a scripted adapter that answers at once,
// next to a bare Unix-socket echo of a frame of the same size in the same run (p50/p99 and
// their ratio), and the throughput of 64 concurrent callers on one connection.
func BenchmarkInvoke(b *testing.B) {
	m := descriptorMap(filepath.Join(shortRoot(b), "fast.sock"))
	lim := m["limits"].(map[string]any)
	lim["maxConcurrentRequests"], lim["maxQueuedRequests"] = 64, 256
	d := mustDescriptor(b, m)
	fastAdapter(b, d)
	c, e := Connect(context.Background(), d, Options{})
	if e != nil {
		b.Fatal(e)
	}
	b.Cleanup(c.Close)
	payload := statReq(1)
	key := IdempotencyKey(tooladapter.OpStat, "bench")
	ctx := context.Background()

	b.Run("roundtrip", func(b *testing.B) {
		echo := echoServer(b)
		nc, err := net.Dial("unix", echo)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		frame, _ := marshalFrame(&tooladapter.Frame{Kind: tooladapter.KindInvoke, Identity: c.id, RequestID: newRequestID(), IdempotencyKey: key, Operation: tooladapter.OpStat, Payload: payload})
		inv := make([]time.Duration, 0, b.N)
		ech := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for b.Loop() {
			t0 := time.Now()
			if _, e := c.Invoke(ctx, tooladapter.OpStat, key, payload); e != nil {
				b.Fatal(e)
			}
			t1 := time.Now()
			if _, err := nc.Write(frame); err != nil {
				b.Fatal(err)
			}
			if _, err := br.ReadSlice('\n'); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			inv = append(inv, t1.Sub(t0))
			ech = append(ech, t2.Sub(t1))
		}
		p50, p99 := percentile(inv, 0.50), percentile(inv, 0.99)
		e50, e99 := percentile(ech, 0.50), percentile(ech, 0.99)
		b.ReportMetric(p50, "invoke-p50-ns")
		b.ReportMetric(p99, "invoke-p99-ns")
		b.ReportMetric(e50, "echo-p50-ns")
		b.ReportMetric(e99, "echo-p99-ns")
		if e50 > 0 {
			b.ReportMetric(p50/e50, "p50-ratio")
		}
	})

	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("concurrent-%d", callers), func(b *testing.B) {
			var wg sync.WaitGroup
			var next sync.Mutex
			remaining := b.N
			take := func() bool {
				next.Lock()
				defer next.Unlock()
				if remaining == 0 {
					return false
				}
				remaining--
				return true
			}
			b.ResetTimer()
			start := time.Now()
			for w := range callers {
				wg.Go(func() {
					k := IdempotencyKey(tooladapter.OpStat, fmt.Sprint("bench-", w))
					for take() {
						if _, e := c.Invoke(ctx, tooladapter.OpStat, k, payload); e != nil {
							b.Error(e)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
		})
	}
}
