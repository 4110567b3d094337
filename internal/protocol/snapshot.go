package protocol

import "time"

// Session runtime states.
const (
	StateOpening = "opening"
	StateIdle    = "idle"
	StateRunning = "running"
	StateFailed  = "failed"
	StateClosing = "closing"
)

// Residency of a logical session.
const (
	Resident = "resident" // a runtime for one generation is loaded
	Dormant  = "dormant"  // only durable records remain
)

// Recovery phases.
const (
	PhaseNotStarted = "not_started"
	PhaseRecovering = "recovering"
	PhaseReady      = "ready"
	PhaseDegraded   = "degraded"
)

// SessionSnapshot is the state of a resident session generation.
type SessionSnapshot struct {
	SessionID       string    `json:"sessionId"`
	Generation      int64     `json:"generation"`
	ProtocolVersion string    `json:"protocolVersion"`
	Name            string    `json:"name,omitempty"`
	State           string    `json:"state"`
	Residency       string    `json:"residency"`
	Sequence        uint64    `json:"sequence"`
	QueuedTurns     int       `json:"queuedTurns"`
	ActiveRequestID string    `json:"activeRequestId,omitempty"`
	LastErrorCode   string    `json:"lastErrorCode,omitempty"`
	Model           *ModelRef `json:"model,omitempty"`
	Attached        int       `json:"attachedConnections"`
	LastUsedAt      time.Time `json:"lastUsedAt"`
	IdleForMs       int64     `json:"idleForMs"`
	// HostToolAdapterQueue is the content-free queue telemetry of the generation's host tool
	// adapter, when it has one.
	HostToolAdapterQueue any `json:"hostToolAdapterQueue,omitempty"`
}

// RecoveryCondition is a per-session quarantine after a restart.
type RecoveryCondition struct {
	State     string `json:"state"`
	Code      string `json:"code"`
	Retryable bool   `json:"retryable"`
}

// QuarantinedSession names a quarantined session generation in host status.
type QuarantinedSession struct {
	SessionID  string `json:"sessionId"`
	Generation int64  `json:"generation"`
	RecoveryCondition
}

// RecoveryHealth is the host's restart-recovery state (host.recovery).
type RecoveryHealth struct {
	Phase                 string               `json:"phase"`
	PendingReplays        int                  `json:"pendingReplays"`
	OpenedSessions        int                  `json:"openedSessions"`
	RestoredSessions      int                  `json:"restoredSessions"`
	ReplayedRequests      int                  `json:"replayedRequests"`
	IndeterminateRequests int                  `json:"indeterminateRequests"`
	FailureCount          int                  `json:"failureCount"`
	FailureCodes          map[string]int       `json:"failureCodes"`
	QuarantinedSessions   []QuarantinedSession `json:"quarantinedSessions"`
	StartedAt             *time.Time           `json:"startedAt,omitempty"`
	CompletedAt           *time.Time           `json:"completedAt,omitempty"`
}

// Limits are the server and multiplexer limits a handshake and host status report.
type Limits struct {
	MaxConnections                   int              `json:"maxConnections"`
	MaxInFlightRequestsPerConnection int              `json:"maxInFlightRequestsPerConnection"`
	MaxLineBytes                     int              `json:"maxLineBytes"`
	MaxEventBytes                    int              `json:"maxEventBytes"`
	MaxResponseBytes                 int              `json:"maxResponseBytes"`
	MaxOutboundBytesPerConnection    int              `json:"maxOutboundBytesPerConnection"`
	Multiplexer                      MultiplexerLimit `json:"multiplexer"`
}

// MultiplexerLimit bounds sessions and turns.
type MultiplexerLimit struct {
	MaxSessions          int `json:"maxSessions"`
	MaxConcurrentTurns   int `json:"maxConcurrentTurns"`
	MaxSessionQueueDepth int `json:"maxSessionQueueDepth"`
}

// MemoryStats is the daemon's memory use as the Go runtime reports it.
type MemoryStats struct {
	TotalBytes uint64 `json:"totalBytes"`
	HeapBytes  uint64 `json:"heapBytes"`
	Goroutines uint64 `json:"goroutines"`
}

// HostSnapshot is the owner-socket host status.
type HostSnapshot struct {
	HostInstanceID  string            `json:"hostInstanceId"`
	Ready           bool              `json:"ready"`
	Durable         bool              `json:"durable"`
	Draining        bool              `json:"draining"`
	Limits          Limits            `json:"limits"`
	ActiveTurns     int               `json:"activeTurns"`
	QueuedTurns     int               `json:"queuedTurns"`
	Connections     int               `json:"connections"`
	StartedAt       time.Time         `json:"startedAt"`
	UptimeMs        int64             `json:"uptimeMs"`
	Memory          MemoryStats       `json:"memory"`
	Metrics         map[string]uint64 `json:"metrics"`
	Recovery        RecoveryHealth    `json:"recovery"`
	Sessions        []SessionSnapshot `json:"sessions"`
	DormantSessions int               `json:"dormantSessions"`
	// Adapters is reported to 2.x clients only: the capability adapters' supervision state.
	Adapters []AdapterState `json:"adapters,omitempty"`
}

// AdapterState is one capability adapter registration as host status reports it.
type AdapterState struct {
	Name         string   `json:"name"`
	Command      string   `json:"command"`
	Args         []string `json:"args"`
	State        string   `json:"state"`
	PID          int      `json:"pid,omitempty"`
	Restarts     int      `json:"restarts"`
	LastFailure  string   `json:"lastFailure,omitempty"`
	Capabilities []string `json:"capabilities"`
	// UnavailableCapabilities are those of Capabilities whose last calls all ended
	// unavailable (capclient.UnavailableAfter of them): listCapabilities shows them
	// unavailable although the adapter is ready.
	UnavailableCapabilities []string `json:"unavailableCapabilities,omitempty"`
	// PassEnv are the names of the variables the adapter is passed from the daemon's
	// environment; never their values.
	PassEnv []string `json:"passEnv,omitempty"`
	// PassEnvUnset are those of PassEnv the daemon's environment does not set now: the
	// adapter starts without them.
	PassEnvUnset []string `json:"passEnvUnset,omitempty"`

	// A temporary adapter's tie and lease end.
	Room           string    `json:"room,omitempty"`
	SessionID      string    `json:"sessionId,omitempty"`
	Generation     int64     `json:"generation,omitempty"`
	LeaseExpiresAt time.Time `json:"leaseExpiresAt,omitzero"`
	// Digests are the recorded file digests by prefix; while the state is "changed", current
	// is what the file hashes to now ("missing" when it cannot be read).
	Digests []AdapterDigest `json:"digests"`
	// Withheld counts the observe and invoke results withheld (result_withheld) since the
	// registration was installed; LastWithheld describes the latest.
	Withheld     int           `json:"withheld,omitempty"`
	LastWithheld *WithheldCall `json:"lastWithheld,omitempty"`
}

// WithheldCall is the latest call of an adapter whose result was withheld: which capability,
// which call (method, and an invoke's action), which screen, and when. It never holds the
// result, its text or the call's arguments.
type WithheldCall struct {
	CapabilityID string    `json:"capabilityId"`
	Method       string    `json:"method"`
	Action       string    `json:"action,omitempty"`
	Screen       string    `json:"screen"`
	At           time.Time `json:"at"`
}

// AdapterDigest is one recorded file digest of an adapter, as status shows it: a prefix of
// the SHA-256, never the file.
type AdapterDigest struct {
	Role     string `json:"role"`
	Path     string `json:"path"`
	Recorded string `json:"recorded"`
	Current  string `json:"current,omitempty"`
}

// LastTerminal records how the latest durable request of a session ended.
type LastTerminal struct {
	State     string    `json:"state"`
	At        time.Time `json:"at"`
	RequestID string    `json:"requestId,omitempty"`
	ErrorCode string    `json:"errorCode,omitempty"`
}

// CatalogFormatVersion is the format of CatalogRecord.
const CatalogFormatVersion = 1

// CatalogRecord is the durable, secret-free record of a logical session. revision grows by one
// on every change.
type CatalogRecord struct {
	FormatVersion   int                `json:"formatVersion"`
	SessionID       string             `json:"sessionId"`
	Name            string             `json:"name,omitempty"`
	Generation      int64              `json:"generation"`
	Revision        uint64             `json:"revision"`
	Residency       string             `json:"residency"`
	State           string             `json:"state"`
	ProtocolVersion string             `json:"protocolVersion"`
	PolicyDigest    string             `json:"policyDigest"`
	Policy          Policy             `json:"policy"`
	CreatedAt       time.Time          `json:"createdAt"`
	UpdatedAt       time.Time          `json:"updatedAt"`
	LastUsedAt      time.Time          `json:"lastUsedAt"`
	Recovery        *RecoveryCondition `json:"recovery,omitempty"`
	LastTerminal    *LastTerminal      `json:"lastTerminal,omitempty"`
	// Conversation is the transcript the session's turns append to; a restart reopens exactly
	// this file. Memory sessions have none.
	Conversation *ConversationRef `json:"conversation,omitempty"`
}

// Capabilities is what a handshake says the host can do.
type Capabilities struct {
	Operations []string `json:"operations"`
	Transport  string   `json:"transport"`
	Durable    bool     `json:"durable"`
	// AgentTurns says this host runs wake, steer, followUp and abort.
	AgentTurns bool `json:"agentTurns"`
	// The members below are reported to 2.x handshakes only.
	HostToolAdapter *bool `json:"hostToolAdapter,omitempty"`
	// HostToolOperationCount is the number of host tool operations a descriptor may grant
	// (fs.list, fs.stat, fs.read, fs.search, fs.write, fs.edit).
	HostToolOperationCount *int `json:"hostToolOperationCount,omitempty"`
	// HostToolAdapterQueueTelemetry says that a session snapshot carries hostToolAdapterQueue,
	// the content-free queue telemetry of its generation's adapter connection.
	HostToolAdapterQueueTelemetry *bool `json:"hostToolAdapterQueueTelemetry,omitempty"`
	// HostToolAdapterRecommendedQueueLimits are the queue limits the host recommends for a
	// descriptor; it never fills them in.
	HostToolAdapterRecommendedQueueLimits *QueueLimits `json:"hostToolAdapterRecommendedQueueLimits,omitempty"`
	ConfiguredOpen                        *bool        `json:"configuredOpen,omitempty"`
	SessionDir                            *bool        `json:"sessionDir,omitempty"`
}

// QueueLimits are the two queue limits of a host tool-adapter descriptor.
type QueueLimits struct {
	MaxConcurrentRequests int `json:"maxConcurrentRequests"`
	MaxQueuedRequests     int `json:"maxQueuedRequests"`
}

// Handshake is the data of a handshake response.
type Handshake struct {
	ProtocolVersion           string       `json:"protocolVersion"`
	PackageVersion            string       `json:"packageVersion"`
	GoVersion                 string       `json:"goVersion"`
	Capabilities              Capabilities `json:"capabilities"`
	SupportedVersions         []string     `json:"supportedVersions,omitempty"`
	SupportedProtocolVersions []string     `json:"supportedProtocolVersions,omitempty"`
	Limits                    Limits       `json:"limits"`
	Host                      HostSnapshot `json:"host"`
}

// OpenResult is the data of open.
type OpenResult struct {
	Created bool            `json:"created"`
	Session SessionSnapshot `json:"session"`
}

// AttachResult is the data of attach.
type AttachResult struct {
	Attached   bool   `json:"attached"`
	Generation int64  `json:"generation"`
	Sequence   uint64 `json:"sequence"`
}

// DetachResult is the data of detach.
type DetachResult struct {
	Detached   bool   `json:"detached"`
	Generation int64  `json:"generation"`
	Sequence   uint64 `json:"sequence"`
}

// CloseResult is the data of close. Deleted is set when retainSession:false removed the
// session's durable records.
type CloseResult struct {
	Closed  bool `json:"closed"`
	Deleted bool `json:"deleted"`
}

// DrainResult is the data of drain.
type DrainResult struct {
	Draining     bool  `json:"draining"`
	TimeoutMs    int64 `json:"timeoutMs"`
	TimedOut     bool  `json:"timedOut"`
	AbortedTurns int   `json:"abortedTurns"`
}

// SessionPage is the data of listSessions.
type SessionPage struct {
	Sessions   []CatalogRecord `json:"sessions"`
	NextCursor string          `json:"nextCursor,omitempty"`
}

// SessionDescription is the data of describeSession: the durable record, and the runtime
// snapshot when the session is resident.
type SessionDescription struct {
	Record   CatalogRecord    `json:"record"`
	Snapshot *SessionSnapshot `json:"snapshot,omitempty"`
	// HostDeniesProposals is true when the host's policy refuses every session's adapter
	// proposals, whatever the session's own policy says, so that a client such as the MCP
	// bridge does not offer the proposal tools.
	HostDeniesProposals bool `json:"hostDeniesProposals,omitempty"`
}

// SessionClosedData is the data of a sessionClosed event.
type SessionClosedData struct {
	RetainSession bool            `json:"retainSession"`
	Reason        string          `json:"reason"` // closed, replaced or shutdown
	Session       SessionSnapshot `json:"session"`
}
