package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
)

// BenchmarkStatusRoundTrip measures a host status round trip through the daemon next to a bare
// NDJSON echo server on a Unix socket, in the same run and with the same client loop, and
// reports both medians and their ratio (the target is ratio-p50 ≤ 2.0):
//
//	go test -run '^$' -bench StatusRoundTrip -benchtime 20000x ./internal/daemon/
func BenchmarkStatusRoundTrip(b *testing.B) {
	root := b.TempDir()
	if len(root) > 80 {
		root = shortDirB(b)
	}
	echoSock := filepath.Join(root, "echo.sock")
	stop := startEcho(b, echoSock)
	defer stop()

	d, err := Start(Config{SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state")})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Shutdown(b.Context())
	waitReady(b, d)

	status := []byte(`{"protocolVersion":"2.0","requestId":"bench","operation":"status","payload":{}}` + "\n")
	echo, daemon := interleaved(b, echoSock, d.cfg.SocketPath, status, b.N)
	e50, e99 := percentile(echo, 50), percentile(echo, 99)
	d50, d99 := percentile(daemon, 50), percentile(daemon, 99)
	b.ReportMetric(float64(e50.Nanoseconds()), "echo-p50-ns")
	b.ReportMetric(float64(e99.Nanoseconds()), "echo-p99-ns")
	b.ReportMetric(float64(d50.Nanoseconds()), "status-p50-ns")
	b.ReportMetric(float64(d99.Nanoseconds()), "status-p99-ns")
	b.ReportMetric(float64(d50)/float64(e50), "ratio-p50")
}

func waitReady(b testing.TB, d *Daemon) {
	for deadline := time.Now().Add(10 * time.Second); !d.sessions.Ready(); {
		if time.Now().After(deadline) {
			b.Fatal("daemon not ready")
		}
		time.Sleep(time.Millisecond)
	}
}

// interleaved times n round trips of req on each of two sockets, alternating between them so
// that both see the same machine: a burst of load on a shared host slows both, not one.
func interleaved(b *testing.B, baseline, subject string, req []byte, n int) (base, subj []time.Duration) {
	bc, sc := dialLine(b, baseline), dialLine(b, subject)
	defer bc.close()
	defer sc.close()
	for range 200 { // warm up both
		bc.roundTrip(b, req)
		sc.roundTrip(b, req)
	}
	base, subj = make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	b.ResetTimer()
	for range n {
		base = append(base, bc.roundTrip(b, req))
		subj = append(subj, sc.roundTrip(b, req))
	}
	return base, subj
}

// lineConn is a minimal NDJSON client: one line out, one line back.
type lineConn struct {
	nc net.Conn
	br *bufio.Reader
}

func dialLine(b *testing.B, socket string) *lineConn {
	c, err := dialLineErr(socket)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// dialLineErr is dialLine for any goroutine.
func dialLineErr(socket string) (*lineConn, error) {
	nc, err := net.Dial("unix", socket)
	if err != nil {
		return nil, err
	}
	return &lineConn{nc: nc, br: bufio.NewReaderSize(nc, 1<<20)}, nil
}

func (c *lineConn) close() { c.nc.Close() }

func (c *lineConn) roundTrip(b *testing.B, req []byte) time.Duration {
	took, err := c.roundTripErr(req)
	if err != nil {
		b.Fatal(err)
	}
	return took
}

// roundTripErr is roundTrip for any goroutine. When the daemon closed the connection, the error
// carries its last line (connection_evicted, connection_capacity…) where it sent one: a
// benchmark fails with the daemon's code, not with a broken pipe.
func (c *lineConn) roundTripErr(req []byte) (time.Duration, error) {
	start := time.Now()
	_, err := c.nc.Write(req)
	if err == nil {
		if _, err = c.br.ReadSlice('\n'); err == nil {
			return time.Since(start), nil
		}
	}
	c.nc.SetReadDeadline(time.Now().Add(time.Second))
	if last, rerr := c.br.ReadSlice('\n'); rerr == nil {
		return 0, fmt.Errorf("%w; the daemon's last line: %s", err, bytes.TrimSpace(last))
	}
	return 0, err
}

// benchLimits are the daemon's default limits with room for clients connections from the
// benchmark's own process: by default one process gets a share of 16 connections (issue 16's
// flood limits), and its idle ones are evicted past it, so a benchmark that opens 64 clients
// raises the share, and the total when it must, to clients.
func benchLimits(clients int) Limits {
	l := DefaultLimits
	l.MaxConnections = max(l.MaxConnections, clients)
	l.MaxConnectionsPerPeer = clients
	return l
}

// callErr is the error of a client call that failed in transport (err) or was refused (r).
func callErr(r *client.Response, err error) error {
	if err != nil {
		return err
	}
	return r.Err()
}

func percentile(lat []time.Duration, p int) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

// startEcho serves a bare NDJSON echo: each line is written back as it came.
func startEcho(b *testing.B, socket string) func() {
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
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return func() { ln.Close(); <-done }
}

func shortDirB(b *testing.B) string {
	d := b.TempDir()
	return d
}
