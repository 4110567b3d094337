package daemon

import (
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
)

// BenchmarkInvokeToolAudit measures what the audit journal adds to invokeTool (issue 27's
// goal: under 10 %): three daemons in this process, one without a journal, one with
// --audit-sync=answer (a started record written before the adapter gets the call, and
// synced with its outcome record before the answer leaves: one group commit per call) and
// one with --audit-sync=interval (both written before the answer, synced by the journal's
// flusher every 100 ms), each with its own fast adapter, timed in turn on one connection
// each, then in alternating rounds of 64 clients. It reports the journal's bytes and
// fdatasyncs per call.
func BenchmarkInvokeToolAudit(b *testing.B) {
	start := func(ac *AuditConfig) *Daemon { return startToolBench(b, Config{Audit: ac}) }
	daemons := []*Daemon{start(nil),
		start(&AuditConfig{Journal: audit.Options{Sync: audit.SyncAnswer}}),
		start(&AuditConfig{Journal: audit.Options{Sync: audit.SyncInterval}})}
	names := []string{"noaudit", "answer", "interval"}
	invoke := statLine
	stats := func() []audit.Stats {
		s := make([]audit.Stats, len(daemons))
		for i, d := range daemons[1:] {
			s[i+1] = d.srv.audit.j.Stats()
		}
		return s
	}

	const warm = 200
	socks := make([]string, len(daemons))
	for i, d := range daemons {
		socks[i] = d.cfg.SocketPath
	}
	var before []audit.Stats
	lat := interleavedAll(b, socks, invoke, warm, b.N, func() { before = stats() })
	after := stats()
	p50 := make([]time.Duration, len(daemons))
	for i := range daemons {
		p50[i] = percentile(lat[i], 50)
		b.ReportMetric(float64(p50[i].Nanoseconds()), names[i]+"-p50-ns")
	}
	for i := 1; i < len(daemons); i++ {
		b.ReportMetric(float64(p50[i])/float64(p50[0]), names[i]+"-ratio-p50")
		b.ReportMetric(float64(after[i].Fsyncs-before[i].Fsyncs)/float64(b.N), names[i]+"-fsyncs/call-1client")
	}

	const rounds = 4
	calls := max(b.N, throughputCalls()) / rounds
	tput := make([]float64, len(daemons))
	before = stats()
	for range rounds {
		for i, d := range daemons {
			waitNoConns(b, d)
			tput[i] += throughput(b, d.cfg.SocketPath, 64, calls)
		}
	}
	after = stats()
	made := rounds * (calls / 64) * 64 // throughput's calls to each daemon
	for i := range daemons {
		b.ReportMetric(tput[i]/rounds, names[i]+"-calls/s-64clients")
		if i == 0 {
			continue
		}
		b.ReportMetric(tput[i]/tput[0], names[i]+"-ratio-calls/s")
		b.ReportMetric(float64(after[i].Bytes-before[i].Bytes)/float64(made), names[i]+"-bytes/call")
		b.ReportMetric(float64(after[i].Fsyncs-before[i].Fsyncs)/float64(made), names[i]+"-fsyncs/call-64clients")
	}
}

// interleavedAll times n round trips of req on each socket, one on each in turn, so that all
// see the same machine, after warm round trips on each that are not timed; mark runs between
// the two (the benchmark's counters start there).
func interleavedAll(b *testing.B, sockets []string, req []byte, warm, n int, mark func()) [][]time.Duration {
	conns := make([]*lineConn, len(sockets))
	for i, s := range sockets {
		conns[i] = dialLine(b, s)
		defer conns[i].close()
	}
	for range warm {
		for _, c := range conns {
			c.roundTrip(b, req)
		}
	}
	mark()
	lat := make([][]time.Duration, len(sockets))
	for i := range lat {
		lat[i] = make([]time.Duration, 0, n)
	}
	b.ResetTimer()
	for range n {
		for i, c := range conns {
			lat[i] = append(lat[i], c.roundTrip(b, req))
		}
	}
	return lat
}
