// Package metrics is airlockd's Prometheus instrumentation: the collectors of calls, latency
// and the audit journal's writes, the collector that reads the daemon's status at scrape time,
// and the loopback endpoint that serves them (airlockd --metrics).
//
// Two kinds of metric live here. Events — a call answered, a room call made, an audit append —
// are counted by the code that sees them: every call at the gate of every effect (DESIGN.md,
// "One gate for every effect") by the gate hook Metrics.Hook, once, in its After; a room call
// this host makes, which the gate sees at its provider, by ObserveRoomCall; the audit
// journal's group commits by ObserveAuditAppend. State that the daemon
// already keeps — sessions, turns, connections, adapter states and restarts, the room bus
// connection, the approvals waiting — is not mirrored into counters sprinkled through the
// code: the status collector asks the daemon for one Status snapshot per scrape, so a scrape
// sees what `airlock status` would.
//
// Label values are bounded. No label carries a session id, request id, path, room id or host
// id: each of those grows without end over a daemon's life, and every distinct value is a
// series Prometheus keeps in memory and on disk. The labels that name things an operator
// configured (capability ids, actions, adapter names) or a code a peer may choose are capped
// per label at MaxLabelValues distinct values; past that, a new value is counted as "other".
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Doors: where a call entered the daemon. They are the values of the door label.
// The gate's doors (gate.Door) are these values too.
const (
	// DoorSocket is the owner socket: the CLI, a harness.
	DoorSocket = "socket"
	// DoorRoom is a room call this host provides, after room authorization.
	DoorRoom = "room"
	// DoorMCP is an owner-socket command of airlock mcp for its MCP client (the envelope's
	// client member): the code it is answered is the code of the client's tool result, whose
	// isError is set for every code but ok.
	DoorMCP = "mcp"
	// DoorTurn is a tool call of an agent turn.
	DoorTurn = "turn"
	// DoorWeb is a call made from the operator's web page.
	DoorWeb = "web"
)

// CodeOK is the code label of a call that succeeded.
const CodeOK = "ok"

// Other is the label value that stands for every value past a label's bound, and for an
// operation or door outside the known set.
const Other = "other"

// MaxLabelValues bounds the distinct values of each open-ended label (capability, action,
// code, adapter).
const MaxLabelValues = 256

// DurationBuckets are the call latency histogram's upper bounds, in seconds: from 10 µs (a
// refusal that never leaves the daemon) to 60 s (the longest a room approval may wait), about
// three buckets a decade.
var DurationBuckets = []float64{
	0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// FsyncBuckets are the audit fsync latency histogram's upper bounds, in seconds: 50 µs (a
// write-back cache) to 2.5 s (a disk in trouble).
var FsyncBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
	0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
}

// operations are the values of the operation label: the six fs operations of invokeTool and
// the two of a capability call.
var operations = map[string]bool{
	"fs.list": true, "fs.stat": true, "fs.read": true, "fs.search": true, "fs.write": true, "fs.edit": true,
	"observe": true, "invoke": true,
}

var doors = map[string]bool{DoorSocket: true, DoorRoom: true, DoorMCP: true, DoorTurn: true, DoorWeb: true}

// Call is one answered call, as ObserveCall counts it.
type Call struct {
	// Door is where the call entered (Door* constants); another value counts as Other.
	Door string
	// Operation is the fs operation of a tool call (fs.read … fs.edit), or observe or invoke
	// for a capability call; another value counts as Other.
	Operation string
	// Capability and Action name a capability call's target ("" for a tool call, Action ""
	// for observe). Pass them only once the call resolved to a capability that exists: an
	// unknown id a client made up is no series.
	Capability string
	Action     string
	// Code is the outcome: "" or CodeOK for success, else the error's stable machine code.
	Code string
}

// RoomCall is one room call this host made, as ObserveRoomCall counts it: the provider, this
// host or another, counts it again at its room door if it reached the gate there.
type RoomCall struct {
	// Door is where the call entered this host (socket, mcp, turn, web); another value counts
	// as Other.
	Door string
	// Operation is observe or invoke; another value counts as Other.
	Operation string
	// Code is the outcome: "" or CodeOK for success, else the code the caller got.
	Code string
}

// Status is the daemon's state as one scrape reports it.
type Status struct {
	Sessions        int // resident sessions
	DormantSessions int
	ActiveTurns     int
	QueuedTurns     int
	Connections     int // open owner-socket connections
	Adapters        []Adapter
	// ApprovalsWaiting counts the requests waiting in the approval queue: calls under ask,
	// room calls of approve-each publications, agents' adapter proposals.
	ApprovalsWaiting int
	// Rooms is the room service's state; nil when it does not run.
	Rooms *Rooms
	// Fabric is when the fabric node's certificate and the fabric's CA expire; nil without
	// airlockd --fabric.
	Fabric *FabricExpiry
	// Counters are the host's content-free event counters that status reports under
	// host.metrics (connectionsAccepted, eventsDropped…), by name. The names are the
	// daemon's own constants.
	Counters map[string]uint64
}

// Adapter is one capability adapter registration's state.
type Adapter struct {
	Name     string
	State    string // capclient.State: starting, ready, backoff, stopped, failed, changed
	Restarts int    // restarts since it was registered or approved
}

// Rooms is the room service's state.
type Rooms struct {
	BusConnected bool // the connection to the room bus is up
	Rooms        int  // rooms this host is in
}

// FabricExpiry is when a fabric node's TLS certificate and its fabric's CA stop being valid.
type FabricExpiry struct {
	Certificate, CA time.Time
}

// AdapterStates are the states the adapter state metric reports for every adapter, one
// series each (1 for the current state, 0 for the others), so that an alert can compare.
var AdapterStates = []string{"starting", "ready", "backoff", "stopped", "failed", "changed"}

// Metrics holds airlockd's collectors in a registry of its own. Its methods are safe for
// concurrent use; a nil *Metrics ignores every observation (the daemon without --metrics).
type Metrics struct {
	reg          *prometheus.Registry
	calls        *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	roomCalls    *prometheus.CounterVec
	roomDuration *prometheus.HistogramVec
	auditBytes   prometheus.Counter
	auditRecords prometheus.Counter
	auditFsync   prometheus.Histogram

	capabilities, actions, codes *labelSet
	series                       sync.Map // callKey → *callSeries
}

// New returns the collectors, registered with the Go runtime's and the process's; status, when
// not nil, is called once per scrape for the state metrics. It must be safe for concurrent use
// and must not block for long.
func New(status func() Status) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_calls_total",
			Help: "Calls answered, by door, operation, capability, action and outcome code (ok, or the error's code).",
		}, []string{"door", "operation", "capability", "action", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_call_duration_seconds",
			Help:    "Time from a call's admission to its answer, by door, operation, capability, action and outcome (ok or error).",
			Buckets: DurationBuckets,
		}, []string{"door", "operation", "capability", "action", "outcome"}),
		roomCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_room_calls_total",
			Help: "Room calls this host made, by the door they entered through, operation and outcome code (ok, or the error's code).",
		}, []string{"door", "operation", "code"}),
		roomDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_room_call_duration_seconds",
			Help:    "Time from a room call's start at this host to its verified answer, by door, operation and outcome (ok or error).",
			Buckets: DurationBuckets,
		}, []string{"door", "operation", "outcome"}),
		auditBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_audit_bytes_total",
			Help: "Bytes appended to the audit journal.",
		}),
		auditRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_audit_records_total",
			Help: "Records appended to the audit journal.",
		}),
		auditFsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "airlock_audit_fsync_duration_seconds",
			Help:    "Duration of the audit journal's fsyncs (one per group commit).",
			Buckets: FsyncBuckets,
		}),
		capabilities: newLabelSet(MaxLabelValues),
		actions:      newLabelSet(MaxLabelValues),
		codes:        newLabelSet(MaxLabelValues),
	}
	m.reg.MustRegister(m.calls, m.duration, m.roomCalls, m.roomDuration, m.auditBytes, m.auditRecords, m.auditFsync,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if status != nil {
		m.reg.MustRegister(&statusCollector{status: status, adapters: newLabelSet(MaxLabelValues), counters: newLabelSet(MaxLabelValues)})
	}
	return m
}

// Registry returns the registry that holds the collectors, for a caller that adds its own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveCall counts one answered call and its duration, from admission to answer.
func (m *Metrics) ObserveCall(c Call, d time.Duration) {
	if m == nil {
		return
	}
	door := c.Door
	if !doors[door] {
		door = Other
	}
	op := c.Operation
	if !operations[op] {
		op = Other
	}
	capability, action := m.capabilities.bound(c.Capability), m.actions.bound(c.Action)
	code, outcome := c.Code, "error"
	if code == "" || code == CodeOK {
		code, outcome = CodeOK, CodeOK
	} else {
		code = m.codes.bound(code)
	}
	k := callKey{door, op, capability, action, code}
	e, ok := m.series.Load(k)
	if !ok {
		// The label values are bounded, so the cache is too.
		e, _ = m.series.LoadOrStore(k, &callSeries{
			count:    m.calls.WithLabelValues(door, op, capability, action, code),
			duration: m.duration.WithLabelValues(door, op, capability, action, outcome),
		})
	}
	cs := e.(*callSeries)
	cs.count.Inc()
	cs.duration.Observe(d.Seconds())
}

// callKey names one call series; callSeries holds its counter and histogram, so that a call
// pays one map lookup rather than two label hashes.
type callKey struct{ door, op, capability, action, code string }

type callSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// ObserveRoomCall counts one room call this host made and its duration.
func (m *Metrics) ObserveRoomCall(c RoomCall, d time.Duration) {
	if m == nil {
		return
	}
	door := c.Door
	if !doors[door] {
		door = Other
	}
	op := c.Operation
	if op != "observe" && op != "invoke" {
		op = Other
	}
	code, outcome := c.Code, "error"
	if code == "" || code == CodeOK {
		code, outcome = CodeOK, CodeOK
	} else {
		code = m.codes.bound(code)
	}
	m.roomCalls.WithLabelValues(door, op, code).Inc()
	m.roomDuration.WithLabelValues(door, op, outcome).Observe(d.Seconds())
}

// ObserveAuditAppend counts one group commit of the audit journal: the records and bytes it
// appended and how long its fsync took.
func (m *Metrics) ObserveAuditAppend(records, bytes int, fsync time.Duration) {
	if m == nil {
		return
	}
	m.auditRecords.Add(float64(records))
	m.auditBytes.Add(float64(bytes))
	m.auditFsync.Observe(fsync.Seconds())
}

// labelSet bounds the distinct values of one label: the first max values pass, later new ones
// become Other. The empty value always passes (it is the label's absence).
type labelSet struct {
	max  int
	seen sync.Map   // string → struct{}: read without a lock on the hot path
	mu   sync.Mutex // serializes admissions and guards n
	n    int
}

func newLabelSet(max int) *labelSet { return &labelSet{max: max} }

func (s *labelSet) bound(v string) string {
	if v == "" {
		return ""
	}
	if _, ok := s.seen.Load(v); ok {
		return v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen.Load(v); ok {
		return v
	}
	if s.n >= s.max {
		return Other
	}
	s.seen.Store(v, struct{}{})
	s.n++
	return v
}
