package daemon

import (
	"testing"

	"github.com/airlockhq/airlock/internal/policy"
)

// BenchmarkInvokeToolPolicy measures what an allow rule adds to invokeTool (issue 26's goal:
// under 5 %): two daemons in this process, one without a policy (the gate's trivial path) and
// one whose host policy decides every call by its rules (a deny rule on .env* that does not
// match, then an allow rule for fs.stat), each with its own fast adapter, timed alternately
// on one connection each so that both see the same load.
func BenchmarkInvokeToolPolicy(b *testing.B) {
	rules, err := policy.Parse([]byte(`{"default":"ask","rules":[
		{"operations":["fs.read","fs.stat"],"paths":[".env*","**/.env*"],"decision":"deny"},
		{"operations":["fs.stat","fs.list"],"decision":"allow"}]}`))
	if err != nil {
		b.Fatal(err)
	}
	start := func(p *policy.Policy) *Daemon { return startToolBench(b, Config{Policy: p}) }
	none, allow := start(nil), start(rules)
	invoke := statLine
	base, subj := interleaved(b, none.cfg.SocketPath, allow.cfg.SocketPath, invoke, b.N)
	n50, a50 := percentile(base, 50), percentile(subj, 50)
	b.ReportMetric(float64(n50.Nanoseconds()), "nopolicy-p50-ns")
	b.ReportMetric(float64(a50.Nanoseconds()), "allow-p50-ns")
	b.ReportMetric(float64(a50)/float64(n50), "ratio-p50")
	// Throughput alternates too, in rounds, so that neither daemon always runs second.
	const rounds = 4
	calls := max(b.N, throughputCalls()) / rounds
	var tn, ta float64
	for range rounds {
		waitNoConns(b, none)
		tn += throughput(b, none.cfg.SocketPath, 64, calls)
		waitNoConns(b, allow)
		ta += throughput(b, allow.cfg.SocketPath, 64, calls)
	}
	b.ReportMetric(tn/rounds, "nopolicy-calls/s-64clients")
	b.ReportMetric(ta/rounds, "allow-calls/s-64clients")
}
