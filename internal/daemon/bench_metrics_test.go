package daemon

import (
	"testing"
)

// BenchmarkInvokeToolMetrics measures what the metrics' gate hook adds to invokeTool: two
// daemons in this process, one without --metrics (the gate has no hook and takes no time) and
// one with it (every call is timed and counted at the gate's After), each with its own fast
// adapter, timed alternately on one connection each so that both see the same load; then
// the throughput of 64 clients, in rounds that alternate which daemon runs first.
//
//	go test -run '^$' -bench InvokeToolMetrics -benchtime 20000x ./internal/daemon/
func BenchmarkInvokeToolMetrics(b *testing.B) {
	start := func(m *MetricsConfig) *Daemon { return startToolBench(b, Config{Metrics: m}) }
	off, on := start(nil), start(&MetricsConfig{Addr: "127.0.0.1:0"})
	invoke := statLine
	base, subj := interleaved(b, off.cfg.SocketPath, on.cfg.SocketPath, invoke, b.N)
	o50, m50 := percentile(base, 50), percentile(subj, 50)
	o99, m99 := percentile(base, 99), percentile(subj, 99)
	b.ReportMetric(float64(o50.Nanoseconds()), "off-p50-ns")
	b.ReportMetric(float64(m50.Nanoseconds()), "on-p50-ns")
	b.ReportMetric(float64(o99.Nanoseconds()), "off-p99-ns")
	b.ReportMetric(float64(m99.Nanoseconds()), "on-p99-ns")
	b.ReportMetric(float64(m50)/float64(o50), "ratio-p50")
	const rounds = 4
	calls := max(b.N, throughputCalls()) / rounds
	var to, tm float64
	// Each daemon runs first in half the rounds: the one that runs second measured faster
	// when the order was fixed.
	for i := range rounds {
		runs := []struct {
			d   *Daemon
			sum *float64
		}{{off, &to}, {on, &tm}}
		if i%2 == 1 {
			runs[0], runs[1] = runs[1], runs[0]
		}
		for _, r := range runs {
			waitNoConns(b, r.d)
			*r.sum += throughput(b, r.d.cfg.SocketPath, 64, calls)
		}
	}
	b.ReportMetric(to/rounds, "off-calls/s-64clients")
	b.ReportMetric(tm/rounds, "on-calls/s-64clients")
	b.ReportMetric(tm/to, "ratio-calls/s")
}
