package toolclient

import (
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

// TestAbortMemory runs on the synctest clock: the retention is exact, with no sleeps on real time.
func TestAbortMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAbortMemory(2, time.Second)
		now := func() time.Time { return time.Now() }
		if !a.add("r1", abortEntry{abortID: "a1", key: "k1", op: tooladapter.OpRead}, now()) ||
			!a.add("r2", abortEntry{abortID: "a2", key: "k2", op: tooladapter.OpStat}, now()) {
			t.Fatal("add under capacity failed")
		}
		if a.add("r3", abortEntry{abortID: "a3", key: "k3", op: tooladapter.OpStat}, now()) {
			t.Fatal("add over capacity succeeded")
		}
		// Late answers must match key and operation, and count once.
		if a.result("r1", "k2", tooladapter.OpRead, now()) || a.result("r1", "k1", tooladapter.OpStat, now()) || a.result("nope", "k1", tooladapter.OpRead, now()) {
			t.Fatal("mismatched late result accepted")
		}
		if !a.result("r1", "k1", tooladapter.OpRead, now()) || a.result("r1", "k1", tooladapter.OpRead, now()) {
			t.Fatal("late result not accepted exactly once")
		}
		// Acknowledgements must name the abort's own id, once; then the entry is settled.
		if a.ack("r1", "a2", now()) || !a.ack("r1", "a1", now()) || a.ack("r1", "a1", now()) {
			t.Fatal("ack")
		}
		if a.len() != 1 {
			t.Fatalf("settled entry kept: %d entries", a.len())
		}
		time.Sleep(999 * time.Millisecond)
		if !a.add("r3", abortEntry{abortID: "a3", key: "k3", op: tooladapter.OpStat}, now()) {
			t.Fatal("add with a free slot failed")
		}
		if a.add("r4", abortEntry{}, now()) {
			t.Fatal("r2 expired early")
		}
		time.Sleep(time.Millisecond) // r2 is exactly one second old now
		if a.result("r2", "k2", tooladapter.OpStat, now()) {
			t.Fatal("expired entry answered")
		}
		if !a.add("r4", abortEntry{abortID: "a4"}, now()) {
			t.Fatal("expired entry not purged")
		}
	})
}

func TestTelemetryTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tel := newTelemetry(tooladapter.Limits{MaxConcurrentRequests: 1, MaxQueuedRequests: 1}, []string{tooladapter.OpRead, tooladapter.OpStat})
		start := time.Now()
		tel.accepted(tooladapter.OpRead)
		tel.occupancy(time.Now(), map[string]int{tooladapter.OpRead: 1}, nil, 1, 0)
		tel.activated(tooladapter.OpRead, 0)
		tel.accepted(tooladapter.OpStat)
		tel.occupancy(time.Now(), map[string]int{tooladapter.OpRead: 1}, map[string]int{tooladapter.OpStat: 1}, 1, 1)
		tel.rejected(tooladapter.OpStat)
		time.Sleep(250 * time.Millisecond)
		mid := tel.snapshot(time.Now())
		if !mid.Saturation.Active || mid.Saturation.Count != 1 || mid.Saturation.TotalMs != 250 || mid.Saturation.LongestMs != 250 {
			t.Fatalf("running saturation = %+v", mid.Saturation)
		}
		tel.ended(tooladapter.OpRead, outCompleted, time.Since(start), true)
		tel.activated(tooladapter.OpStat, 250*time.Millisecond)
		tel.occupancy(time.Now(), map[string]int{tooladapter.OpStat: 1}, nil, 1, 0)
		time.Sleep(100 * time.Millisecond)
		tel.ended(tooladapter.OpStat, outTimedOut, 350*time.Millisecond, false)
		tel.occupancy(time.Now(), nil, nil, 0, 0)
		s := tel.snapshot(time.Now())
		want := Saturation{Active: false, Count: 1, TotalMs: 250, LongestMs: 250}
		if s.Saturation != want {
			t.Fatalf("saturation = %+v, want %+v", s.Saturation, want)
		}
		if s.HighWater != (QueueCounts{1, 1}) || s.Occupancy != (QueueCounts{}) {
			t.Fatalf("counts = %+v %+v", s.HighWater, s.Occupancy)
		}
		if s.AcceptedRequests != 2 || s.CompletedRequests != 1 || s.TimedOutRequests != 1 || s.RejectedRequests != 1 || s.LastRejectionReason != tooladapter.CodeQueueCapacity {
			t.Fatalf("counters = %+v", s)
		}
		read, stat := s.Operations[0], s.Operations[1]
		if read.RequestLatencyMs != (Timing{Count: 1, Sum: 250, Min: 250, Max: 250, Last: 250}) {
			t.Fatalf("fs.read latency = %+v", read.RequestLatencyMs)
		}
		if stat.QueueWaitMs != (Timing{Count: 1, Sum: 250, Min: 250, Max: 250, Last: 250}) || stat.RequestLatencyMs.Count != 0 {
			t.Fatalf("fs.stat timings = %+v %+v", stat.QueueWaitMs, stat.RequestLatencyMs)
		}
		if stat.RejectedRequests != 1 || stat.TimedOutRequests != 1 || read.CompletedRequests != 1 {
			t.Fatalf("per-operation counters = %+v %+v", read, stat)
		}
	})
}

func TestTimingSummary(t *testing.T) {
	var tm Timing
	for _, ms := range []float64{5, 1.5, 9, 2} {
		tm.add(time.Duration(ms * float64(time.Millisecond)))
	}
	if tm != (Timing{Count: 4, Sum: 17.5, Min: 1.5, Max: 9, Last: 2}) {
		t.Fatalf("timing = %+v", tm)
	}
}

func TestRetryAfter(t *testing.T) {
	for in, want := range map[int64]int64{100: 25, 519: 25, 520: 26, 2000: 100, 20000: 1000, 30000: 1000, 120000: 1000} {
		if got := RetryAfter(in); got != want {
			t.Errorf("RetryAfter(%d) = %d, want %d", in, got, want)
		}
	}
}

// TestTelemetryShape pins the wire names of the queue telemetry (facts §5.6), which the status
// schema repeats.
func TestTelemetryShape(t *testing.T) {
	tel := newTelemetry(tooladapter.Limits{MaxConcurrentRequests: 4, MaxQueuedRequests: 16}, []string{tooladapter.OpRead})
	tel.rejected(tooladapter.OpRead)
	b, err := json.Marshal(tel.snapshot(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"capacity":{"maxConcurrentRequests":4,"maxQueuedRequests":16},"occupancy":{"activeRequests":0,"queuedRequests":0},` +
		`"highWater":{"activeRequests":0,"queuedRequests":0},"acceptedRequests":0,"completedRequests":0,"failedRequests":0,` +
		`"rejectedRequests":1,"cancelledRequests":0,"timedOutRequests":0,"lastRejectionReason":"adapter_queue_capacity",` +
		`"saturation":{"active":false,"count":0,"totalMs":0,"longestMs":0},"operations":[{"operation":"fs.read",` +
		`"activeRequests":0,"queuedRequests":0,"acceptedRequests":0,"completedRequests":0,"failedRequests":0,` +
		`"rejectedRequests":1,"cancelledRequests":0,"timedOutRequests":0,"queueWaitMs":{"count":0,"sum":0,"min":0,"max":0,"last":0},` +
		`"requestLatencyMs":{"count":0,"sum":0,"min":0,"max":0,"last":0}}]}`
	if string(b) != want {
		t.Fatalf("telemetry JSON =\n%s\nwant\n%s", b, want)
	}
}
