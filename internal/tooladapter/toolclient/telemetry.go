package toolclient

import (
	"math"
	"time"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

// QueueSnapshot is the content-free queue telemetry of one connection: counts and timings, never
// a path, payload, key or handle. Timings are milliseconds.
type QueueSnapshot struct {
	Capacity            QueueCapacity       `json:"capacity"`
	Occupancy           QueueCounts         `json:"occupancy"`
	HighWater           QueueCounts         `json:"highWater"`
	AcceptedRequests    uint64              `json:"acceptedRequests"`
	CompletedRequests   uint64              `json:"completedRequests"`
	FailedRequests      uint64              `json:"failedRequests"`
	RejectedRequests    uint64              `json:"rejectedRequests"`
	CancelledRequests   uint64              `json:"cancelledRequests"`
	TimedOutRequests    uint64              `json:"timedOutRequests"`
	LastRejectionReason string              `json:"lastRejectionReason,omitempty"`
	Saturation          Saturation          `json:"saturation"`
	Operations          []OperationSnapshot `json:"operations"`
}

// QueueCapacity is the negotiated queue bound.
type QueueCapacity struct {
	MaxConcurrentRequests int64 `json:"maxConcurrentRequests"`
	MaxQueuedRequests     int64 `json:"maxQueuedRequests"`
}

// QueueCounts counts active (sent to the adapter) and queued (admitted, not yet sent) requests.
type QueueCounts struct {
	ActiveRequests int `json:"activeRequests"`
	QueuedRequests int `json:"queuedRequests"`
}

// Saturation describes the episodes during which both the active slots and the queue were
// full, so that every new request was refused. TotalMs and LongestMs include a running episode.
type Saturation struct {
	Active    bool    `json:"active"`
	Count     uint64  `json:"count"`
	TotalMs   float64 `json:"totalMs"`
	LongestMs float64 `json:"longestMs"`
}

// OperationSnapshot is the telemetry of one granted operation. QueueWaitMs runs from admission
// until the invoke frame is handed to the writer; RequestLatencyMs from admission until the
// request ends, for requests that got an answer from the adapter (completed or failed by it).
type OperationSnapshot struct {
	Operation         string `json:"operation"`
	ActiveRequests    int    `json:"activeRequests"`
	QueuedRequests    int    `json:"queuedRequests"`
	AcceptedRequests  uint64 `json:"acceptedRequests"`
	CompletedRequests uint64 `json:"completedRequests"`
	FailedRequests    uint64 `json:"failedRequests"`
	RejectedRequests  uint64 `json:"rejectedRequests"`
	CancelledRequests uint64 `json:"cancelledRequests"`
	TimedOutRequests  uint64 `json:"timedOutRequests"`
	QueueWaitMs       Timing `json:"queueWaitMs"`
	RequestLatencyMs  Timing `json:"requestLatencyMs"`
}

// Timing summarizes durations in milliseconds. Min, Max and Last are 0 while Count is 0.
type Timing struct {
	Count uint64  `json:"count"`
	Sum   float64 `json:"sum"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Last  float64 `json:"last"`
}

func (t *Timing) add(d time.Duration) {
	ms := millis(d)
	if t.Count == 0 || ms < t.Min {
		t.Min = ms
	}
	if ms > t.Max {
		t.Max = ms
	}
	t.Count++
	t.Sum = round3(t.Sum + ms)
	t.Last = ms
}

// millis converts d to milliseconds rounded to the microsecond.
func millis(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// outcome is how an admitted request ended.
type outcome int

const (
	outCompleted outcome = iota
	outFailed
	outCancelled
	outTimedOut
)

// telemetry is the mutable state behind QueueSnapshot; Conn.mu guards it.
type telemetry struct {
	snap     QueueSnapshot
	ops      map[string]*OperationSnapshot
	satStart time.Time
	satCur   bool
}

func newTelemetry(l tooladapter.Limits, ops []string) *telemetry {
	t := &telemetry{ops: make(map[string]*OperationSnapshot, len(ops))}
	t.snap.Capacity = QueueCapacity{l.MaxConcurrentRequests, l.MaxQueuedRequests}
	t.snap.Operations = make([]OperationSnapshot, len(ops))
	for i, op := range ops {
		t.snap.Operations[i].Operation = op
		t.ops[op] = &t.snap.Operations[i]
	}
	return t
}

func (t *telemetry) rejected(op string) {
	t.snap.RejectedRequests++
	t.snap.LastRejectionReason = tooladapter.CodeQueueCapacity
	if o := t.ops[op]; o != nil {
		o.RejectedRequests++
	}
}

func (t *telemetry) accepted(op string) {
	t.snap.AcceptedRequests++
	t.ops[op].AcceptedRequests++
}

func (t *telemetry) activated(op string, wait time.Duration) { t.ops[op].QueueWaitMs.add(wait) }

func (t *telemetry) ended(op string, out outcome, latency time.Duration, answered bool) {
	o := t.ops[op]
	switch out {
	case outCompleted:
		t.snap.CompletedRequests++
		o.CompletedRequests++
	case outFailed:
		t.snap.FailedRequests++
		o.FailedRequests++
	case outCancelled:
		t.snap.CancelledRequests++
		o.CancelledRequests++
	case outTimedOut:
		t.snap.TimedOutRequests++
		o.TimedOutRequests++
	}
	if answered {
		o.RequestLatencyMs.add(latency)
	}
}

// occupancy records the current counts of every operation and in total, the high water marks
// and saturation episodes.
func (t *telemetry) occupancy(now time.Time, active, queued map[string]int, nActive, nQueued int) {
	for op, o := range t.ops {
		o.ActiveRequests, o.QueuedRequests = active[op], queued[op]
	}
	t.totals(now, nActive, nQueued)
}

// moved changes the active and queued counts of op by dActive and dQueued: a connection keeps
// them current request by request instead of recounting on every change.
func (t *telemetry) moved(op string, dActive, dQueued int) {
	o := t.ops[op]
	o.ActiveRequests += dActive
	o.QueuedRequests += dQueued
}

// totals records the current total counts, the high water marks and saturation episodes.
func (t *telemetry) totals(now time.Time, nActive, nQueued int) {
	t.snap.Occupancy = QueueCounts{nActive, nQueued}
	t.snap.HighWater.ActiveRequests = max(t.snap.HighWater.ActiveRequests, nActive)
	t.snap.HighWater.QueuedRequests = max(t.snap.HighWater.QueuedRequests, nQueued)
	sat := int64(nActive) >= t.snap.Capacity.MaxConcurrentRequests && int64(nQueued) >= t.snap.Capacity.MaxQueuedRequests
	switch {
	case sat && !t.satCur:
		t.satCur, t.satStart = true, now
		t.snap.Saturation.Count++
	case !sat && t.satCur:
		d := millis(now.Sub(t.satStart))
		t.satCur = false
		t.snap.Saturation.TotalMs = round3(t.snap.Saturation.TotalMs + d)
		t.snap.Saturation.LongestMs = max(t.snap.Saturation.LongestMs, d)
	}
}

// snapshot returns a copy, with a running saturation episode counted up to now.
func (t *telemetry) snapshot(now time.Time) QueueSnapshot {
	s := t.snap
	s.Operations = append([]OperationSnapshot(nil), t.snap.Operations...)
	if t.satCur {
		d := millis(now.Sub(t.satStart))
		s.Saturation.Active = true
		s.Saturation.TotalMs = round3(s.Saturation.TotalMs + d)
		s.Saturation.LongestMs = max(s.Saturation.LongestMs, d)
	}
	return s
}

// RetryAfter returns the retryAfterMs hint of a capacity refusal:
// max(25, min(1000, floor(requestTimeoutMs/20))).
func RetryAfter(requestTimeoutMs int64) int64 {
	return max(25, min(1000, requestTimeoutMs/20))
}
