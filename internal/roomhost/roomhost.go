// Package roomhost is the room service airlockd runs: it starts the embedded bus or joins
// another daemon's, loads the host key, keeps the rooms this host created or joined and its
// publications in the durable store, answers room calls to its published capabilities
// through the capability supervisor, makes calls as a caller, holds per-call approvals, and
// keeps a bounded log of calls for the owner's surfaces (socket, CLI, web page).
//
// The room rules themselves (signed rosters, projections and calls, provider-side
// authorization at dispatch and at result) are package room's; the NATS wiring is package
// bus's. This package joins them to the daemon.
//
// # Secrets
//
// Nothing this package returns, logs or writes to the bus holds a capability handle, adapter
// output other than a capability's bounded result, an endpoint or the host's private key. A
// join code is returned once, to the owner who asked for it, and is never logged; the owner
// keeps only its SHA-256 digest, in memory, until it is used or expires.
package roomhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

// Defaults of the service.
const (
	// DefaultInviteTTL is how long a join code stays valid: long enough to pass it to the
	// other operator, short enough that a leaked code is soon worthless.
	DefaultInviteTTL = 10 * time.Minute
	// MaxInvites bounds the join codes waiting to be used at one host.
	MaxInvites = 64
	// DefaultCallLogEntries bounds the call log kept in memory.
	DefaultCallLogEntries = 256
	// SubscriberBuffer bounds the events queued for one subscriber; a slow one loses the
	// oldest.
	SubscriberBuffer = 64
	// MaxSubscribers bounds the call-log subscribers at once.
	MaxSubscribers = 32
	// busTimeout bounds one bus operation the service makes for an operator's request.
	busTimeout = 10 * time.Second
)

// Capabilities is the local capability supervisor, as the room service uses it: the
// provider's invoker, and the descriptors that publications are checked against.
type Capabilities interface {
	room.Invoker
	Describe(id string) (capadapter.Descriptor, error)
	// UnavailableReason says why capability id cannot be shown available (its adapter is
	// not ready, ReasonAdapterNotReady, or its last calls all ended unavailable,
	// ReasonCallsUnavailable), or "" when it can. It never refuses a call.
	UnavailableReason(id string) string
}

// Config configures a Service. StateDir, Store and Capabilities are required.
type Config struct {
	// StateDir holds the host key (room.HostKeyFile) and, for the embedded server, its
	// JetStream store.
	StateDir     string
	Store        *store.Store
	Capabilities Capabilities
	// Invoker, when set, is what the provider calls to run a room call this host provides
	// instead of Capabilities: the daemon's gate in front of it. ErrorCode, when set, maps
	// its errors to a room reply's code instead of capadapter.WireCode, so that the gate's
	// refusals keep their codes.
	Invoker   room.Invoker
	ErrorCode func(error) string
	Logger    *slog.Logger

	// Via joins the embedded bus of another daemon of the same operator instead of embedding
	// one: this host is admitted there as its nkey user (BusSeedFile) with the rooms it is
	// in, and connects to the URL the admission answers.
	Via Admission
	// Listen is the embedded server's listen address; empty means 127.0.0.1 on a random
	// port. A non-loopback address is refused.
	Listen string
	// Fabric, when set, makes the embedded server a node of a room fabric (bus.LoadFabric):
	// the host connects to it as its nkey user, with bus.InboxPrefix and the fabric's
	// replicas, and on a cluster node its user's rooms follow the rooms this host is in.
	// Its host id must be this host's. Exclusive with Via and Listen.
	Fabric *bus.Fabric
	// NodeStarted, when set, is given the fabric node as soon as it runs, before Start waits
	// for the fabric to form, so that its status can be read meanwhile (airlock fabric
	// status while a node waits for its peers); the node is shut down if Start fails.
	NodeStarted func(*bus.Server)

	// Approver, when set, decides the per-call approvals of this host's ApproveEach
	// publications (airlockd's one approval queue); Approvals, Decide and ApprovalsWaiting
	// then see none of them. Nil keeps them in the service's own room.Approvals.
	Approver room.Approver

	// ApprovalWait is how long this host's calls to a publication with per-call approval
	// wait for the provider's decision (at most, and by default, room.ApprovalTimeout).
	ApprovalWait time.Duration
	// InviteTTL is how long a join code is valid; zero means DefaultInviteTTL.
	InviteTTL time.Duration
	// PresenceTTL overrides room.PresenceTTL (tests).
	PresenceTTL time.Duration
	// presenceRefresh overrides the presence refresh, a third of the TTL (tests).
	presenceRefresh time.Duration
	// CallLogEntries bounds the call log; zero means DefaultCallLogEntries.
	CallLogEntries int
	// RoomClosed, when set, is called after CloseRoom closed or left room id, on its
	// goroutine and with none of the service's locks held; the daemon stops the temporary
	// adapters tied to the room there. ctx is CloseRoom's. It is also called, on a goroutine
	// of the service's (which Close waits for), after this host forgot a room because the
	// owner's roster no longer lists it (the owner closed the room or removed this host);
	// not for a room found so while Start restores it, which the daemon handles once the
	// service runs.
	RoomClosed func(ctx context.Context, id string)

	// clock replaces time.Now for invites and join requests (tests).
	clock func() time.Time
	// busAttempt replaces busAttempt, the bound of one attempt of a bus request at start
	// (tests).
	busAttempt time.Duration
	// noResponders, when set, is told each time a join request found nobody serving the
	// owner's subject, before it is sent again (tests).
	noResponders func()
	// viaURL, when set, replaces the URL the admission answers (tests reach the bus through a
	// proxy).
	viaURL string
	// keepEvery overrides how often the service checks that the room buckets exist (tests).
	keepEvery time.Duration
}

// Service is a running room service.
type Service struct {
	cfg     Config
	log     *slog.Logger
	key     *room.HostKey
	server  *bus.Server  // nil when joined to another daemon's server
	users   *brokerUsers // nil on a fabric leaf node
	local   *localBus    // the users of the embedded server without a fabric; else nil
	conn    *bus.Conn
	url     string
	dir     *room.Directory
	pubs    *room.Publications
	approve *room.Approvals
	sync    *room.Sync
	// resync is sync once it is open, for the bus connection's reconnect hook, which may run
	// while Start is still setting the service up.
	resync   atomic.Pointer[room.Sync]
	provider *room.Provider
	caller   *room.Caller
	rooms    busport.Bucket
	joinSub  busport.Subscription
	events   *callLog
	// now is the clock of invites and join requests (tests move it).
	now func() time.Time

	// rosterMu serializes changes of the rosters this host owns (joins, close) and the
	// forgetting of rooms whose owner dropped this host.
	rosterMu sync.Mutex
	// wg counts the goroutines that forget a room whose owner dropped this host.
	wg sync.WaitGroup
	// stop ends the keeper (keep), which keepWG counts; life ends with it, and with it the
	// keeper's bus request in flight, which would otherwise hold Close until its timeout
	// (a request to a stream whose leader's node just stopped gets no answer).
	stop    chan struct{}
	life    context.Context
	endLife context.CancelFunc
	keepWG  sync.WaitGroup

	mu      sync.Mutex
	joined  map[string]store.RoomRecord
	invites map[[32]byte]invite
	version map[string]uint64 // last projection version written per room
	closed  bool
	// live is set when Start is done: from then on a room whose owner dropped this host is
	// forgotten at once and Config.RoomClosed told (before, restore forgets it and the
	// daemon removes what was tied to it).
	live bool
}

// Start loads the host key, starts or joins the bus, and rejoins the stored rooms with their
// publications.
func Start(ctx context.Context, cfg Config) (_ *Service, err error) {
	if cfg.StateDir == "" || cfg.Store == nil || cfg.Capabilities == nil {
		return nil, errors.New("roomhost: incomplete configuration")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.InviteTTL <= 0 {
		cfg.InviteTTL = DefaultInviteTTL
	}
	if cfg.ApprovalWait <= 0 || cfg.ApprovalWait > room.ApprovalTimeout {
		cfg.ApprovalWait = room.ApprovalTimeout
	}
	if cfg.clock == nil {
		cfg.clock = time.Now
	}
	if cfg.CallLogEntries <= 0 {
		cfg.CallLogEntries = DefaultCallLogEntries
	}
	if cfg.Fabric != nil && (cfg.Via != nil || cfg.Listen != "") {
		return nil, errors.New("roomhost: a fabric node is configured by its fabric file, without another daemon's bus or a listen address")
	}
	if cfg.Via != nil && cfg.Listen != "" {
		return nil, errors.New("roomhost: a listen address configures the embedded bus, which another daemon's replaces")
	}
	key, created, err := room.LoadOrCreateHostKey(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if cfg.Fabric != nil && cfg.Fabric.HostID() != string(key.ID()) {
		return nil, errorf(CodeFabricHost, "the fabric file serves host %s, but this daemon's host id is %s", cfg.Fabric.HostID(), key.ID())
	}
	s := &Service{
		cfg: cfg, log: cfg.Logger, key: key,
		dir: room.NewDirectory(), pubs: room.NewPublications(),
		events:  newCallLog(cfg.CallLogEntries),
		now:     cfg.clock,
		joined:  make(map[string]store.RoomRecord),
		invites: make(map[[32]byte]invite),
		version: make(map[string]uint64),
		stop:    make(chan struct{}),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.approve = room.NewApprovals(s.pending)
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if created {
		s.log.Info("room host key created", "hostId", key.ID())
	}

	var dial bus.DialConfig
	switch {
	case cfg.Fabric != nil:
		if s.server, err = bus.StartServer(bus.ServerConfig{StateDir: cfg.StateDir, Fabric: cfg.Fabric, Logger: s.log}); err != nil {
			return nil, err
		}
		if cfg.NodeStarted != nil {
			cfg.NodeStarted(s.server)
		}
		dial = cfg.Fabric.DialConfig(s.server)
		s.users = newBrokerUsers(s.server, cfg.Fabric)
		if err := s.users.set(storedRooms(cfg.Store, key.ID())); err != nil {
			return nil, err
		}
		if err := s.waitFabric(ctx); err != nil {
			return nil, err
		}
		s.url = s.server.ClientURL()
	default:
		if dial, err = s.startBus(ctx); err != nil {
			return nil, err
		}
	}
	dial.Reconnected = s.reconnected
	if s.conn, err = bus.Dial(dial); err != nil {
		return nil, err
	}
	err = s.retryBus(ctx, func(ctx context.Context) (err error) {
		s.rooms, err = s.conn.Bucket(ctx, busport.BucketConfig{Name: room.RoomsBucket, MaxValueBytes: room.MaxRecordBytes})
		return err
	})
	if err != nil {
		return nil, err
	}
	err = s.retryBus(ctx, func(ctx context.Context) (err error) {
		s.sync, err = room.OpenSync(ctx, room.SyncConfig{Key: key, Conn: s.conn, Directory: s.dir, PresenceTTL: cfg.PresenceTTL,
			PresenceRefresh: cfg.presenceRefresh, Dropped: s.dropped})
		return err
	})
	if err != nil {
		return nil, err
	}
	s.resync.Store(s.sync)
	var invoker room.Invoker = cfg.Capabilities
	if cfg.Invoker != nil {
		invoker = cfg.Invoker
	}
	errorCode := capadapter.WireCode
	if cfg.ErrorCode != nil {
		errorCode = cfg.ErrorCode
	}
	s.provider, err = room.NewProvider(room.ProviderConfig{
		Key: key, Conn: s.conn, Directory: s.dir, Publications: s.pubs, Invoker: invoker,
		Approvals: s.approve, Approver: cfg.Approver, ErrorCode: errorCode, OnCall: s.provided,
		Floors: floors{store: cfg.Store, log: s.log},
	})
	if err != nil {
		return nil, err
	}
	if err := s.provider.Start(); err != nil {
		return nil, err
	}
	s.caller = room.NewCaller(key, s.conn, s.dir)
	if s.joinSub, err = s.conn.Serve(joinSubject("*", key.ID()), 4, (*joinHandler)(s)); err != nil {
		return nil, err
	}
	if err := s.restore(ctx); err != nil {
		return nil, err
	}
	// A roster that dropped this host between its room's restore and now was not acted on.
	s.mu.Lock()
	s.live = true
	ids := make([]string, 0, len(s.joined))
	for id := range s.joined {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.dropped(id)
	}
	s.keepWG.Go(s.keep)
	s.log.Info("rooms ready", "hostId", key.ID(), "embedded", s.server != nil, "rooms", len(s.joined))
	return s, nil
}

// reconnected is the bus connection's Reconnected hook: back on the bus, this host rewrites
// its presence at once and restarts its watches (room.Sync.Reconnected), so that members see
// it again without waiting for the next refresh and it sees what changed while it was away.
func (s *Service) reconnected() {
	if sy := s.resync.Load(); sy != nil {
		sy.Reconnected()
	}
	if s.cfg.Via != nil {
		s.readmit()
	}
}

// readmit tells the daemon whose bus this host joined its rooms again, on a goroutine of the
// service: that daemon may have restarted, and until told it knows this host's rooms only from
// the rosters it reads.
func (s *Service) readmit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.live {
		return
	}
	s.wg.Go(func() {
		s.users.mu.Lock()
		err := s.users.apply()
		s.users.mu.Unlock()
		if err != nil {
			s.log.Warn("rooms not told again to the daemon whose bus this host is on", "err", err)
		}
	})
}

// restore rejoins every stored room and republishes this host's publications into them.
func (s *Service) restore(ctx context.Context) error {
	recs, err := s.cfg.Store.Rooms()
	if err != nil {
		return err
	}
	pubs, err := s.cfg.Store.Publications()
	if err != nil {
		return err
	}
	for _, p := range pubs {
		if err := s.pubs.Publish(publicationOf(p)); err != nil {
			s.log.Warn("stored publication not restored", "room", p.Room, "capability", p.Capability, "code", room.CodeOf(err))
		}
	}
	for _, r := range recs {
		if err := s.retryBus(ctx, func(ctx context.Context) error { return s.rejoin(ctx, r) }); err != nil {
			s.log.Warn("room not rejoined", "room", r.ID, "code", codeOf(err), "err", err)
			continue
		}
		// Closed by its owner while this host was away: forgotten now, and the daemon removes
		// what was tied to it once the service runs (its RoomClosed is not called here).
		s.forgetDropped(ctx, r.ID)
	}
	return nil
}

func (s *Service) rejoin(ctx context.Context, r store.RoomRecord) error {
	owner := room.HostID(r.Owner)
	if err := s.dir.Trust(r.ID, owner); err != nil {
		return err
	}
	if err := s.users.permit(r.ID, owner == s.key.ID()); err != nil {
		return err
	}
	if owner == s.key.ID() {
		if err := s.sync.PublishRoster(ctx, rosterOf(r)); err != nil {
			return err
		}
	}
	if err := s.sync.Join(ctx, r.ID); err != nil {
		return err
	}
	if err := s.provider.ServeRoom(r.ID); err != nil {
		return err
	}
	s.mu.Lock()
	s.joined[r.ID] = r
	s.mu.Unlock()
	return s.project(ctx, r.ID)
}

// Close leaves the bus: the provider stops answering, this host's presence is withdrawn, the
// connection drains and the embedded server, if any, stops. It is idempotent.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.endLife()
	s.keepWG.Wait()
	s.wg.Wait()
	var errs []error
	if s.provider != nil {
		errs = append(errs, s.provider.Close())
	}
	if s.joinSub != nil {
		errs = append(errs, s.joinSub.Stop())
	}
	if s.sync != nil {
		errs = append(errs, s.sync.Close())
	}
	if s.conn != nil {
		errs = append(errs, s.conn.Close())
	}
	if s.local != nil {
		errs = append(errs, s.local.close())
	}
	if s.server != nil {
		errs = append(errs, s.server.Close())
	}
	s.events.closeAll()
	return errors.Join(errs...)
}

// HostID is this host's public identity.
func (s *Service) HostID() room.HostID { return s.key.ID() }

// Status is what the owner sees of the room service.
type Status struct {
	HostID room.HostID `json:"hostId"`
	// NATSURL is the bus this host is on: its embedded server's client URL (which a second
	// daemon passes to --nats-url; tls://… on a fabric node, which only nkey users of the
	// fabric may join) or the URL it joined.
	NATSURL  string `json:"natsUrl"`
	Embedded bool   `json:"embedded"`
	Rooms    int    `json:"rooms"`
}

// Status reports the service's identity and bus.
func (s *Service) Status() Status {
	s.mu.Lock()
	n := len(s.joined)
	s.mu.Unlock()
	return Status{HostID: s.key.ID(), NATSURL: s.url, Embedded: s.server != nil, Rooms: n}
}

// BusConnected reports whether the service's connection to the room bus is up: false while
// it has lost its server and tries to reconnect.
func (s *Service) BusConnected() bool { return s.conn.Connected() }

// ApprovalsWaiting counts the calls waiting for this host's operator to decide.
func (s *Service) ApprovalsWaiting() int { return len(s.approve.Pending()) }

// Error is every error the service returns: a stable machine code and a message that quotes
// no argument, result, join code or key.
type Error struct {
	code  string
	msg   string
	cause error
}

// Error codes of the service beyond package room's, which pass through unchanged.
const (
	// CodeUnknownRoom: this host is not in a room of that id.
	CodeUnknownRoom = "unknown_room"
	// CodeRoomExists: a room of that id exists already.
	CodeRoomExists = "room_exists"
	// CodeNotOwner: only the room's owner may do that (invite).
	CodeNotOwner = "not_owner"
	// CodeUnknownCapability: no local capability of that id, or no visible capability of
	// that provider in the room.
	CodeUnknownCapability = "unknown_capability"
	// CodeInvalidJoinCode: a join code that is malformed, unknown, used or expired; all
	// look the same to the joiner.
	CodeInvalidJoinCode = "invalid_join_code"
	// CodeTooManyInvites: MaxInvites join codes are waiting to be used.
	CodeTooManyInvites = "too_many_invites"
)

func (e *Error) Error() string {
	if e.msg == "" {
		return e.code
	}
	return e.code + ": " + e.msg
}

// Code is the error's stable machine code.
func (e *Error) Code() string { return e.code }

// Message is the error's message without its code.
func (e *Error) Message() string { return e.msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.cause }

// Is compares by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.code == e.code
}

func errorf(code, format string, args ...any) *Error {
	return &Error{code: code, msg: fmt.Sprintf(format, args...)}
}

// asError gives any error the service's form: a room error keeps its code and detail, a
// capability error its wire code, anything else is internal without detail (the cause is
// kept for the log).
func asError(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var re *room.Error
	if errors.As(err, &re) {
		msg := re.Detail
		if msg == "" {
			msg = remoteMessage(re.Code)
		}
		return &Error{code: re.Code, msg: msg, cause: err}
	}
	var ce *capadapter.Error
	if errors.As(err, &ce) {
		code := capadapter.WireCode(err)
		return &Error{code: code, msg: capadapter.WireMessage(err, code), cause: err}
	}
	return &Error{code: room.CodeInternal, msg: "internal error", cause: err}
}

// remoteMessage describes a code a provider answered with, which comes without detail.
func remoteMessage(code string) string {
	switch code {
	case room.CodeUnauthorized:
		return "the provider did not authorize the call"
	case room.CodeUnavailable:
		return "the capability or its provider is unavailable"
	case room.CodeBusy:
		return "the provider is busy; try again"
	case room.CodeTimeout:
		return "no result within the call deadline"
	case room.CodeApprovalDenied:
		return "the provider's operator denied the call"
	case room.CodeApprovalTimeout:
		return "the provider's operator did not decide in time"
	case room.CodeDuplicateRequest:
		return "the provider cannot tell the call from one it may have run: its request id was used for another call, " +
			"or it is older than the provider remembers (as a call signed just before the provider restarted is); make a new call"
	case capadapter.CodeResultWithheld:
		return "the call ran at the provider, but its result was withheld: it failed the runtime's screens"
	}
	return "the provider answered " + code
}

func codeOf(err error) string {
	var e *Error
	if errors.As(asError(err), &e) {
		return e.code
	}
	return ""
}

// marshal is json.Marshal for values that always marshal.
func marshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}
