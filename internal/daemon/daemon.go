// Package daemon wires airlockd together: the owner socket, connections and dispatch, the
// session manager and the durable store, startup recovery and shutdown.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/approval"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/orphan"
	"github.com/airlockhq/airlock/internal/ownersock"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/session"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/web"
)

// Config configures a daemon.
type Config struct {
	SocketPath  string
	StateDir    string
	Limits      Limits
	MaxSessions int
	Logger      *slog.Logger
	Version     string // reported by handshake

	// peerUID overrides the uid allowed to connect (default: the effective uid); tests use it
	// to prove that other users are refused.
	peerUID *int
	// Adapters tunes the capability-adapter supervisor; the zero value uses its defaults.
	Adapters capclient.Options

	// Providers are the model backends sessions may use, by name; their keys stay in memory.
	Providers map[string]session.Provider
	// Turns bounds agent turns; zero members take the session package's defaults.
	Turns TurnLimits

	// Rooms configures the room service; nil runs none.
	Rooms *RoomsConfig

	// Web configures the operator's web page over the room service; nil serves none.
	Web *WebConfig

	// Metrics configures the Prometheus endpoint (metrics.go); nil serves none and counts
	// nothing.
	Metrics *MetricsConfig
	// Policy is the host's policy (airlockd --policy): it applies to every call at every
	// door, beside the session's own; nil allows all.
	Policy *policy.Policy
	// Audit configures the audit journal (audit.go); nil keeps none.
	Audit *AuditConfig
	// GateHooks are installed on the gate before the socket accepts (the audit journal, the
	// metrics); more can be added with Daemon.Gate().AddHook.
	GateHooks []gate.Hook
	// ApprovalTimeout is how long a request waits in the approval queue for the operator
	// (airlockd --approval-timeout); zero means approval.DefaultTimeout (60 s), and it is at
	// most approval.MaxTimeout.
	ApprovalTimeout time.Duration
	// OnApproval, when set, is told of every event of the approval queue (approvals.go), on
	// the goroutine that caused it: it must not block (the audit journal, the metrics).
	OnApproval func(approval.Event)

	// ManagedFS configures the airlock-fs airlockd runs itself for opens of tools mode
	// "airlock-fs" (managedfs.go); nil runs none.
	ManagedFS *ManagedFSConfig

	// dispatchHook, when set, runs before every command; tests use it to hold commands in
	// flight.
	dispatchHook func(*protocol.Command)
}

// TurnLimits bound agent turns and startup recovery.
type TurnLimits struct {
	MaxConcurrentTurns  int
	QueueDepth          int
	MaxToolOutputBytes  int
	RecoveryOpenTimeout time.Duration
	RecoveryTimeout     time.Duration
}

// Daemon is a running airlockd.
type Daemon struct {
	cfg       Config
	log       *slog.Logger
	hostID    string
	startedAt time.Time
	store     *store.Store
	sessions  *session.Manager
	srv       *Server
	ln        *ownersock.Socket
	web       *web.Server    // nil without Config.Web
	promSrv   *promServer    // nil without Config.Metrics
	bg        sync.WaitGroup // recovery

	// stopAuditExport ends the audit head's export, which closes auditDone once it has
	// exported the final head (audit.go).
	stopAuditExport context.CancelFunc
	auditDone       chan struct{}

	closeOnce sync.Once
	closeErr  error
	done      chan struct{}
}

// Start opens the state, listens on the owner socket and recovers the catalog in the
// background: the socket answers (not ready) while recovery runs.
func Start(cfg Config) (*Daemon, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, err
	}
	if cfg.SocketPath == "" || cfg.StateDir == "" {
		return nil, errors.New("socket path and state directory are required")
	}
	uid := os.Geteuid()
	if cfg.peerUID != nil {
		uid = *cfg.peerUID
	}

	st, err := store.Open(cfg.StateDir, store.Options{})
	if err != nil {
		return nil, err
	}
	// With the state directory locked (store.Open), the adapter groups a killed daemon left
	// running are killed before any adapter starts again, so that none runs twice.
	ledger, reaped, err := orphan.Open(filepath.Join(cfg.StateDir, "adapter-groups"), cfg.Logger)
	if err != nil {
		st.Close()
		return nil, err
	}
	for _, r := range reaped {
		cfg.Logger.Warn("killed an adapter process group left running by the daemon before", "pgid", r.PGID, "processes", r.Members, "exited", r.Gone)
	}
	adapterOpts := cfg.Adapters
	adapterOpts.Children = ledger
	sup, err := capclient.New(adapterOpts)
	if err != nil {
		st.Close()
		return nil, err
	}
	d := &Daemon{
		cfg:       cfg,
		log:       cfg.Logger,
		hostID:    newID(),
		startedAt: time.Now(),
		store:     st,
		done:      make(chan struct{}),
		auditDone: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.srv = &Server{
		hostID:   d.hostID,
		ownerUID: uid,
		limits:   cfg.Limits,
		log:      cfg.Logger,
		host:     d.hostSnapshot,
		hook:     cfg.dispatchHook,
		version:  cfg.Version,
		ctx:      ctx,
		cancel:   cancel,
		conns:    make(map[*conn]struct{}),
		metrics:  make(map[string]uint64),
		pool:     ownersock.NewPool(cfg.SocketPath, cfg.Limits.MaxConnections, cfg.Limits.MaxConnectionsPerPeer, cfg.Logger),
	}
	d.srv.gate = gate.New(gate.Config{Host: cfg.Policy, Hooks: cfg.GateHooks})
	d.srv.pool.ReserveControl(cfg.Limits.ControlConnections, cfg.Limits.ControlConnectionsPerPeer)
	maxAttachments, maxAttachmentsPerSession := cfg.Limits.Attachments()
	maxSessions := cfg.MaxSessions
	if maxSessions <= 0 {
		maxSessions = session.DefaultMaxSessions
	}
	turns := cfg.Turns
	if turns.MaxConcurrentTurns <= 0 {
		turns.MaxConcurrentTurns = session.DefaultMaxConcurrentTurns
	}
	if turns.QueueDepth <= 0 {
		turns.QueueDepth = session.DefaultQueueDepth
	}
	d.srv.wire = protocol.Limits{
		MaxConnections:                   cfg.Limits.MaxConnections,
		MaxInFlightRequestsPerConnection: cfg.Limits.MaxInFlight,
		MaxLineBytes:                     cfg.Limits.MaxLineBytes,
		MaxEventBytes:                    cfg.Limits.MaxEventBytes,
		MaxResponseBytes:                 cfg.Limits.MaxResponseBytes,
		MaxOutboundBytesPerConnection:    cfg.Limits.MaxOutboundBytes,
		Multiplexer: protocol.MultiplexerLimit{
			MaxSessions:          maxSessions,
			MaxConcurrentTurns:   turns.MaxConcurrentTurns,
			MaxSessionQueueDepth: turns.QueueDepth,
		},
	}
	d.sessions = session.New(session.Config{
		HostInstanceID: d.hostID,
		Store:          st,
		MaxSessions:    maxSessions,
		Logger:         cfg.Logger,
		EncodeEvent:    d.srv.encodeEvent,

		MaxAttachments:           maxAttachments,
		MaxAttachmentsPerSession: maxAttachmentsPerSession,

		Providers:           cfg.Providers,
		SessionsDir:         filepath.Join(cfg.StateDir, "sessions"),
		QueueDepth:          turns.QueueDepth,
		MaxConcurrentTurns:  turns.MaxConcurrentTurns,
		MaxToolOutputBytes:  turns.MaxToolOutputBytes,
		RecoveryOpenTimeout: turns.RecoveryOpenTimeout,
		RecoveryTimeout:     turns.RecoveryTimeout,
		RoomTools:           d.srv.roomTools,
		GateTools:           d.srv.gateTurnTools,
		// Temporary adapters tied to a generation end with it; d.srv.adapters is set below,
		// before the listener accepts any open or close.
		// So do the grants airlockd minted for it from its own airlock-fs; d.srv.fsys is
		// set below too.
		HostTools: d.srv.proposalTools,
		GenerationEnded: func(id string, generation int64) {
			d.srv.proposals.sessionEnded(id, generation)
			d.srv.adapters.sessionEnded(id, generation)
			d.srv.fsys.sessionEnded(id, generation)
			d.srv.approvals.End(approval.Scope{Session: id, Generation: generation})
		},
	})
	d.srv.sessions = d.sessions
	d.startApprovals()
	mfs := ManagedFSConfig{Disabled: "none configured"}
	if cfg.ManagedFS != nil {
		mfs = *cfg.ManagedFS
	}
	d.srv.fsys = newManagedFS(mfs, cfg.SocketPath, d.hostID, cfg.Logger)
	d.srv.fsys.regrant = d.srv.regrant
	d.srv.adapters = newAdapterHost(sup, st, d.sessions, d.log)
	d.srv.adapters.checkRoom = d.srv.checkOpenRoom
	d.srv.roomsPending = cfg.Rooms != nil
	// Publications of a registration that stops serving are withdrawn before its child stops,
	// whatever the reason (see OnAdapterRemoved).
	d.srv.adapters.OnAdapterRemoved(func(r capclient.Removal) { d.srv.withdraw(r.Capabilities) })
	d.srv.adapters.OnAdapterRemoved(d.srv.auditRemoval)
	sup.OnChanged(d.srv.auditChanged)
	d.srv.proposals = newProposals(d.srv, d.srv.approvals, d.log)
	d.srv.adapters.OnAdapterRemoved(d.srv.proposals.adapterRemoved)

	if err := d.startMetrics(); err != nil {
		cancel()
		sup.Close(context.Background())
		st.Close()
		return nil, fmt.Errorf("metrics endpoint: %w", err)
	}
	if err := d.openAudit(); err != nil {
		d.stopMetrics(context.Background())
		cancel()
		sup.Close(context.Background())
		st.Close()
		return nil, fmt.Errorf("audit journal: %w", err)
	}
	if err := d.startWeb(); err != nil {
		d.closeAudit()
		d.stopMetrics(context.Background())
		cancel()
		sup.Close(context.Background())
		st.Close()
		return nil, fmt.Errorf("web page: %w", err)
	}
	ln, err := ownersock.Listen(cfg.SocketPath, os.Geteuid())
	if err != nil {
		d.stopWeb(context.Background())
		d.closeAudit()
		d.stopMetrics(context.Background())
		cancel()
		sup.Close(context.Background())
		st.Close()
		return nil, err
	}
	d.ln = ln
	var exportCtx context.Context
	exportCtx, d.stopAuditExport = context.WithCancel(context.Background())
	d.startAuditExport(exportCtx)
	d.srv.wg.Add(1)
	go d.srv.serve(ln)
	d.log.Info("airlockd listening", "socket", cfg.SocketPath, "stateDir", cfg.StateDir,
		"hostInstanceId", d.hostID, "pid", os.Getpid())

	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		if err := d.sessions.Recover(); err != nil {
			d.log.Error("recovery failed; the host stays degraded", "err", err)
			return
		}
		if d.sessions.Ready() {
			d.log.Info("airlockd ready")
		} else {
			d.log.Warn("airlockd listening degraded: recovery left failures or indeterminate wakes; see host.recovery")
		}
		// Adapters start after readiness: a slow or broken adapter delays only its own
		// capabilities, never the host.
		n, err := d.srv.adapters.restore(ctx, d.log)
		if err != nil {
			d.log.Error("capability adapter registrations not readable", "err", err)
		}
		if n > 0 {
			d.log.Info("capability adapters restored", "adapters", n)
		}
		d.startRooms(ctx)
	}()
	return d, nil
}

// HostInstanceID returns this incarnation's id.
func (d *Daemon) HostInstanceID() string { return d.hostID }

// Done is closed when Shutdown has finished.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Shutdown stops the daemon: it stops accepting, tells attached clients their sessions are
// closing, answers the commands in flight until ctx ends, then drops what is left and closes
// the store. Resident sessions stay in the catalog and are dormant at the next start.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.closeOnce.Do(func() {
		d.log.Info("airlockd stopping")
		d.ln.Close()
		d.sessions.Shutdown()
		d.srv.stopConns()
		stopped := make(chan struct{})
		go func() {
			d.srv.wg.Wait()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-ctx.Done():
			d.log.Warn("shutdown deadline passed; dropping connections")
			d.srv.killConns()
			<-stopped
		}
		d.srv.cancel()
		d.bg.Wait()
		// Proposals in flight end before the adapters and the rooms they would use.
		d.srv.proposals.close()
		// The page goes before the room service it shows.
		d.stopWeb(ctx)
		d.stopMetrics(ctx)
		d.stopRooms()
		d.srv.fsys.close()
		if err := d.srv.adapters.sup.Close(ctx); err != nil {
			d.log.Warn("capability adapters did not all stop in time", "err", err)
		}
		// Last: every call and event has been answered and recorded.
		d.closeAudit()
		if err := d.store.Close(); err != nil {
			d.closeErr = fmt.Errorf("close store: %w", err)
		}
		d.log.Info("airlockd stopped")
		close(d.done)
	})
	return d.closeErr
}

func (s *Server) wireLimits() protocol.Limits {
	return s.wire
}

func (d *Daemon) hostSnapshot(v2 bool) protocol.HostSnapshot {
	h := d.hostView()
	if v2 {
		for _, a := range d.srv.adapters.sup.Status() {
			h.Adapters = append(h.Adapters, protocol.AdapterState{
				Name: a.Name, Command: a.Command, Args: a.Args, State: string(a.State), PID: a.PID,
				Restarts: a.Restarts, LastFailure: a.LastFailure, Capabilities: a.Capabilities,
				UnavailableCapabilities: a.UnavailableCapabilities, PassEnv: a.PassEnv, PassEnvUnset: a.PassEnvUnset,
				Room: a.Room, SessionID: a.Session, Generation: a.Generation, LeaseExpiresAt: a.LeaseExpires,
				Digests: adapterDigests(a.Digests), Withheld: a.Withheld,
			})
			if w := a.LastWithheld; w != nil {
				h.Adapters[len(h.Adapters)-1].LastWithheld = (*protocol.WithheldCall)(w)
			}
		}
	}
	return h
}

func adapterDigests(ds []capclient.DigestStatus) []protocol.AdapterDigest {
	out := make([]protocol.AdapterDigest, 0, len(ds))
	for _, d := range ds {
		out = append(out, protocol.AdapterDigest(d))
	}
	return out
}

func (d *Daemon) hostView() protocol.HostSnapshot {
	v := d.sessions.Host()
	d.srv.metricsSnapshot(v.Metrics)
	now := time.Now()
	return protocol.HostSnapshot{
		HostInstanceID:  d.hostID,
		Ready:           v.Ready,
		Durable:         true,
		Draining:        v.Draining,
		Limits:          d.srv.wireLimits(),
		ActiveTurns:     v.ActiveTurns,
		QueuedTurns:     v.QueuedTurns,
		Connections:     d.srv.connections(),
		StartedAt:       d.startedAt.UTC(),
		UptimeMs:        now.Sub(d.startedAt).Milliseconds(),
		Memory:          readMemory(),
		Metrics:         v.Metrics,
		Recovery:        v.Recovery,
		Sessions:        v.Sessions,
		DormantSessions: v.Dormant,
	}
}

var memorySamples = []string{
	"/memory/classes/total:bytes",
	"/memory/classes/heap/objects:bytes",
	"/sched/goroutines:goroutines",
}

// memoryStaleness is how old a memory sample status may report. Reading the runtime's metrics
// costs more than the rest of a status answer; a tenth of a second is fresher than any
// supervisor polls.
const memoryStaleness = 100 * time.Millisecond

var memoryCache struct {
	sync.Mutex
	at    time.Time
	stats protocol.MemoryStats
}

// readMemory samples the Go runtime's memory metrics, which unlike ReadMemStats does not stop
// the world, at most once per memoryStaleness.
func readMemory() protocol.MemoryStats {
	memoryCache.Lock()
	defer memoryCache.Unlock()
	now := time.Now()
	if now.Sub(memoryCache.at) < memoryStaleness {
		return memoryCache.stats
	}
	s := make([]metrics.Sample, len(memorySamples))
	for i, name := range memorySamples {
		s[i].Name = name
	}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	memoryCache.at = now
	memoryCache.stats = protocol.MemoryStats{TotalBytes: u(0), HeapBytes: u(1), Goroutines: u(2)}
	return memoryCache.stats
}
