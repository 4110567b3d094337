package daemon

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// BenchmarkInvokeToolAudit measures what the audit journal adds to invokeTool (issue 27's
// goal: under 10 %): two daemons in this process, one without a journal and one with it (a
// started record made durable before the adapter gets the call, an outcome record made
// durable before the answer leaves, each a group commit), each with its own fast adapter,
// timed alternately on one connection each, then in alternating rounds of 64 clients. It
// reports the journal's bytes per call.
func BenchmarkInvokeToolAudit(b *testing.B) {
	start := func(ac *AuditConfig) *Daemon {
		root := daemontest.ShortDir(b)
		adapterSock := filepath.Join(root, "fs.sock")
		stop := startFastAdapter(b, adapterSock)
		b.Cleanup(stop)
		d, err := Start(Config{SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state"),
			Limits: benchLimits(64), Audit: ac})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Shutdown(context.Background()) })
		waitReady(b, d)
		openToolSession(b, d, adapterSock)
		return d
	}
	off, on := start(nil), start(&AuditConfig{})
	invoke := []byte(`{"protocolVersion":"2.0","requestId":"b","operation":"invokeTool","sessionId":"bench","generation":1,` +
		`"payload":{"toolCallId":"c1","operation":"fs.stat","arguments":{"path":"."}}}` + "\n")
	j := on.srv.audit.j
	before := j.Stats()
	base, subj := interleaved(b, off.cfg.SocketPath, on.cfg.SocketPath, invoke, b.N)
	after := j.Stats()
	o50, a50 := percentile(base, 50), percentile(subj, 50)
	b.ReportMetric(float64(o50.Nanoseconds()), "noaudit-p50-ns")
	b.ReportMetric(float64(a50.Nanoseconds()), "audit-p50-ns")
	b.ReportMetric(float64(a50)/float64(o50), "ratio-p50")
	// interleaved warms each daemon up with 200 calls first.
	b.ReportMetric(float64(after.Fsyncs-before.Fsyncs)/float64(b.N+200), "fsyncs/call-1client")
	const rounds = 4
	calls := max(b.N, throughputCalls()) / rounds
	var to, ta float64
	before = j.Stats()
	for range rounds {
		waitNoConns(b, off)
		to += throughput(b, off.cfg.SocketPath, 64, calls)
		waitNoConns(b, on)
		ta += throughput(b, on.cfg.SocketPath, 64, calls)
	}
	after = j.Stats()
	made := rounds * (calls / 64) * 64 // throughput's calls to the journal's daemon
	b.ReportMetric(float64(after.Bytes-before.Bytes)/float64(made), "audit-bytes/call")
	b.ReportMetric(to/rounds, "noaudit-calls/s-64clients")
	b.ReportMetric(ta/rounds, "audit-calls/s-64clients")
	b.ReportMetric(float64(after.Fsyncs-before.Fsyncs)/float64(made), "fsyncs/call-64clients")
	if n := after.Fsyncs - before.Fsyncs; n > 0 {
		b.ReportMetric(float64((after.FsyncTotal-before.FsyncTotal).Microseconds())/float64(n), "fsync-us-64clients")
	}
}
