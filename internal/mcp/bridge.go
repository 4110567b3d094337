// Package mcp is airlock's MCP bridge: an MCP server, built on the official Go SDK, whose tools
// are exactly what one session generation was granted (its fs.* operations) and the
// capabilities an operator names, and which calls them through airlockd's owner socket like
// any other client. It holds no capability handle and no key: the daemon checks every call
// against the session's grant and walks its paths, and the adapter confines it again.
//
// A Bridge serves any number of MCP sessions (one on stdio, many over Streamable HTTP, see
// HTTPHandler) over at most maxConns daemon connections, each carrying one call at a time. It
// polls the daemon for the session's grant and the capabilities' availability and changes its
// tool list when they change, which the SDK announces with notifications/tools/list_changed.
package mcp

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
	"github.com/airlockhq/airlock/internal/version"
)

// DefaultPollInterval is how often a Bridge asks the daemon whether the session's grant or a
// capability's availability changed. Two small requests every two seconds cost the daemon
// nothing measurable, and a client learns of a removed adapter within that time.
const DefaultPollInterval = 2 * time.Second

// refreshTimeout bounds one poll: the daemon answers describeSession and listCapabilities from
// memory, so a poll that takes this long means a wedged daemon, and the next one retries.
const refreshTimeout = 10 * time.Second

// abortTimeout bounds the abortTool sent for a cancelled call. It is sent on a detached
// context because the call's own context is already done.
const abortTimeout = 5 * time.Second

// maxConns bounds the daemon connections of one process's bridge, and so its daemon calls in
// flight: each connection carries one call at a time (and its abort). The daemon closes a
// connection whose unread answers pass its outbound bound (4 MiB by default), and one
// connection carrying many large reads at once did (make bench-mcp, 16 reads of 1 MiB); one
// answer always fits. 16 is the daemon's default share of one process
// (--max-connections-per-peer), less the connections the process holds besides
// (Config.HeldConns); further calls wait for a connection. A connection past the share
// would be admitted only to the daemon's control band, where a call is refused.
const maxConns = 16

// Config configures a Bridge.
type Config struct {
	// Socket is airlockd's owner socket.
	Socket string
	// SessionID and Generation name the session generation whose grant the tools are.
	SessionID  string
	Generation int64
	// Capabilities are the capability ids whose observe and actions become tools.
	Capabilities []string
	// PollInterval is DefaultPollInterval when zero.
	PollInterval time.Duration
	// HeldConns is how many daemon connections the process holds besides the bridge's, each
	// busy for as long as it is held (airlock mcp --dir's, which holds its session): the
	// bridge uses that many fewer, at least one.
	HeldConns int
	// Logger receives the bridge's own log lines (never arguments or results); nil discards.
	Logger *slog.Logger
}

// Bridge is the MCP server of one session generation. Its methods are safe for concurrent use.
type Bridge struct {
	cfg    Config
	log    *slog.Logger
	srv    *sdk.Server
	impl   *sdk.Implementation // the server's, as results of the stateless revision name it
	keys   *keyTable
	prefix string // of daemon request ids
	seq    atomic.Uint64
	// fastCalls counts the calls the stdio fast path took (tests read it).
	fastCalls atomic.Int64
	slots     chan struct{} // one per connection in use
	// maxLine is the daemon's bound on a command line (its handshake's limits.maxLineBytes),
	// read at the start and at Resume; 0 until then. A call past it is refused here,
	// adapter_request_too_large, instead of the daemon closing its connection.
	maxLine atomic.Int64
	// held is what every call and refresh answers while the bridge is held (Hold) or failed
	// (Fail), else nil.
	held atomic.Pointer[protocol.Error]

	dmu     sync.Mutex
	idle    []*client.Client // daemon connections that carry no call
	dclosed bool

	mu     sync.Mutex // guards the fields below and serializes refreshes
	specs  map[string]toolSpec
	descs  map[string]capadapter.Descriptor // by capability id, of the last listing
	closed bool

	stop chan struct{}
	wg   sync.WaitGroup // the poller and detached capability calls
}

// New connects to the daemon, reads the session's grant and the named capabilities, and returns
// a Bridge with those tools, polling for changes until Close. It fails when the daemon is
// unreachable, when the session is unknown or its current generation is not cfg.Generation,
// and when a named capability is served by no adapter: each a mistake of the command line.
func New(ctx context.Context, cfg Config) (*Bridge, error) {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Bridge{
		cfg:    cfg,
		log:    log,
		keys:   newKeyTable(),
		prefix: "mcp-" + rand.Text()[:12] + "-",
		slots:  make(chan struct{}, max(1, maxConns-cfg.HeldConns)),
		specs:  map[string]toolSpec{},
		descs:  map[string]capadapter.Descriptor{},
		stop:   make(chan struct{}),
	}
	b.impl = &sdk.Implementation{Name: "airlock", Title: "airlock", Version: version.Version}
	b.srv = sdk.NewServer(b.impl, &sdk.ServerOptions{
		Instructions: fmt.Sprintf("Tools of airlock session %q generation %d: the filesystem operations it was granted "+
			"(paths relative to the granted directory) and the capabilities its operator named. An error's text gives airlock's "+
			"machine code and, on its second line, what to do next; _meta[\"io.airlock/error\"] carries both (code, hint).", cfg.SessionID, cfg.Generation),
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
		SetCacheable: uncachedPrivate,
		Logger:       log,
	})
	b.srv.AddReceivingMiddleware(codedErrors)
	if err := b.startup(ctx); err != nil {
		b.closeDaemon()
		return nil, err
	}
	b.wg.Go(b.poll)
	return b, nil
}

// startup is the first refresh, stricter than the later ones.
func (b *Bridge) startup(ctx context.Context) error {
	if err := b.readLimits(ctx); err != nil {
		return fmt.Errorf("mcp: handshake: %w", err)
	}
	var d protocol.SessionDescription
	if err := b.daemonCall(ctx, client.Command{Operation: protocol.OpDescribeSession, SessionID: b.cfg.SessionID}, &d); err != nil {
		return fmt.Errorf("mcp: session %q: %w", b.cfg.SessionID, err)
	}
	if g := d.Record.Generation; g != b.cfg.Generation {
		code := protocol.CodeSessionNotFound
		if g > b.cfg.Generation {
			code = protocol.CodeStaleGeneration
		}
		return &protocol.Error{Code: code, Message: fmt.Sprintf("session %q is at generation %d, not %d", b.cfg.SessionID, g, b.cfg.Generation),
			Details: map[string]any{"sessionId": b.cfg.SessionID, "currentGeneration": g, "receivedGeneration": b.cfg.Generation}}
	}
	if len(b.cfg.Capabilities) > 0 {
		var list struct {
			Capabilities []capclient.CapabilitySummary `json:"capabilities"`
		}
		if err := b.daemonCall(ctx, client.Command{Operation: protocol.OpListCapabilities}, &list); err != nil {
			return fmt.Errorf("mcp: listCapabilities: %w", err)
		}
		for _, id := range b.cfg.Capabilities {
			if !slices.ContainsFunc(list.Capabilities, func(c capclient.CapabilitySummary) bool { return c.CapabilityID == id }) {
				// The message names the id: the CLI and a client on stdio show the
				// protocol error alone, not the wrapping around it.
				return fmt.Errorf("mcp: --caps: %w", protocol.Errorf(capadapter.CodeUnknownCapability,
					"no registered adapter serves capability %q", id).With("capabilityId", id))
			}
		}
	}
	return b.refresh(ctx)
}

// readLimits reads the daemon's line bound from its handshake.
func (b *Bridge) readLimits(ctx context.Context) error {
	var h protocol.Handshake
	if err := b.daemonCall(ctx, client.Command{Operation: protocol.OpHandshake}, &h); err != nil {
		return err
	}
	b.maxLine.Store(int64(h.Limits.MaxLineBytes))
	return nil
}

// Server returns the MCP server, to run on a transport (Serve) or behind HTTPHandler.
func (b *Bridge) Server() *sdk.Server { return b.srv }

// Serve runs one MCP session on t until the client disconnects or ctx ends.
func (b *Bridge) Serve(ctx context.Context, t sdk.Transport) error {
	return b.srv.Run(ctx, t)
}

// Close stops polling, waits for the capability calls still running (each bounded by the
// daemon's own deadlines) and closes the daemon connections. It is idempotent.
func (b *Bridge) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.stop)
	b.mu.Unlock()
	b.wg.Wait()
	b.closeDaemon()
	return nil
}

func (b *Bridge) closeDaemon() {
	b.dmu.Lock()
	defer b.dmu.Unlock()
	b.dclosed = true
	for _, dc := range b.idle {
		dc.Close()
	}
	b.idle = nil
}

// lease is one daemon connection, held by one call until release.
type lease struct {
	b      *Bridge
	dc     *client.Client
	broken bool
}

// lease takes a connection slot and an idle connection, dialling a new one when none is idle
// (or the idle ones ended: a restarted daemon, or one that closed a connection). A held bridge
// leases nothing (Hold).
func (b *Bridge) lease(ctx context.Context) (*lease, error) {
	if e := b.held.Load(); e != nil {
		held := *e
		return nil, &held
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	b.dmu.Lock()
	for len(b.idle) > 0 {
		dc := b.idle[len(b.idle)-1]
		b.idle = b.idle[:len(b.idle)-1]
		select {
		case <-dc.Done():
			dc.Close()
			continue
		default:
		}
		b.dmu.Unlock()
		return &lease{b: b, dc: dc}, nil
	}
	b.dmu.Unlock()
	dc, err := client.Dial(ctx, b.cfg.Socket)
	if err != nil {
		<-b.slots
		return nil, &protocol.Error{Code: CodeDaemonUnreachable, Message: "cannot reach airlockd at " + b.cfg.Socket, Retryable: true}
	}
	return &lease{b: b, dc: dc}, nil
}

// release hands the connection back (or closes it, when it failed or the bridge closed) and
// frees the slot.
func (l *lease) release() {
	b := l.b
	b.dmu.Lock()
	if l.broken || b.dclosed {
		l.dc.Close()
	} else {
		b.idle = append(b.idle, l.dc)
	}
	b.dmu.Unlock()
	<-b.slots
}

// send sends cmd on the lease's connection. Context errors come back as they are, so that a
// caller can tell a cancellation from a failure.
func (l *lease) send(ctx context.Context, cmd client.Command) (*client.Response, error) {
	if cmd.RequestID == "" {
		cmd.RequestID = l.b.requestID()
	}
	l.dc.SetMaxLineBytes(l.b.maxLine.Load())
	resp, err := l.dc.Call(ctx, cmd)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var long *client.LineTooLongError
		if errors.As(err, &long) {
			// Not sent: the connection is as good as before, and the same call is as long
			// the next time. The code and hint of a request over an adapter's bound.
			return nil, &protocol.Error{Code: tooladapter.CodeRequestTooLarge,
				Message: fmt.Sprintf("the call's arguments make a request of %d bytes, over the %d bytes airlockd reads in one; send less in one call", long.Bytes, long.Limit),
				Details: map[string]any{"maxLineBytes": long.Limit}}
		}
		l.broken = true
		return nil, &protocol.Error{Code: CodeDaemonUnreachable, Message: "the connection to airlockd ended before its answer", Retryable: true}
	}
	return resp, nil
}

// CodeDaemonUnreachable is the code of a tool call the bridge could not deliver: the daemon's
// socket refused the connection, or the connection ended before the answer.
const CodeDaemonUnreachable = "daemon_unreachable"

// daemonCall runs one command and decodes its data into v (when not nil). A refusal is the
// daemon's *protocol.Error; a transport failure is daemon_unreachable.
func (b *Bridge) daemonCall(ctx context.Context, cmd client.Command, v any) error {
	resp, err := b.send(ctx, cmd)
	if err != nil {
		return err
	}
	if v == nil {
		return resp.Err()
	}
	return resp.Decode(v)
}

// send sends cmd on a leased connection (see lease.send).
func (b *Bridge) send(ctx context.Context, cmd client.Command) (*client.Response, error) {
	l, err := b.lease(ctx)
	if err != nil {
		return nil, err
	}
	defer l.release()
	return l.send(ctx, cmd)
}

func (b *Bridge) requestID() string {
	return b.prefix + strconv.FormatUint(b.seq.Add(1), 10)
}

// poll refreshes the tool list every PollInterval until Close.
func (b *Bridge) poll() {
	t := time.NewTicker(b.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
		if err := b.refresh(ctx); err != nil {
			b.log.Debug("tool list refresh failed", "err", err)
		}
		cancel()
	}
}

// Hold makes every call and every refresh answer daemon_unreachable (retryable), with msg as
// its message, without reaching the daemon, until Resume; the tools stay listed. airlock mcp
// --dir holds its bridge while it opens its session again after airlockd restarted: until the
// open is through, the new daemon does not know the session, so a call would be refused
// session_not_found, which tells a model to give up, and a refresh would take every tool away
// (and announce it) only to put them back a moment later. A call already past its lease is
// not affected: its connection was to the daemon that went, and it fails as it is.
//
// Hold covers the gap from the moment airlock mcp learns of the loss, not from the loss. A
// stopping daemon closes and deletes a connection-scoped session before it closes the
// connection that owns it, and airlock mcp learns of the loss from that connection's end. A
// call or a poll that the daemon answers on another connection in between sees the session
// gone: the call answers session_not_found, and the refresh removes every tool of the session
// (one list_changed) until Resume lists them again (another). The bridge cannot tell that
// session_not_found from the session being closed by an operator (airlock session close),
// whose owner connection stays open and whose tools must go, so it takes neither as a loss to
// hold over. The window is the daemon's few steps between the two closes; airlockd killed
// (SIGKILL) has none, its connections and the session ending together.
func (b *Bridge) Hold(msg string) {
	b.Fail(&protocol.Error{Code: CodeDaemonUnreachable, Message: msg, Retryable: true})
}

// Fail makes every call and every refresh answer err without reaching the daemon, as Hold
// does, and for good (or until Resume); the tools stay listed. airlock mcp --dir fails its
// bridge when it cannot open its session again: a client on stdio, which a server that exits
// tells only "connection closed", reads why, and what to do, in the answer to its next call.
func (b *Bridge) Fail(err *protocol.Error) {
	e := *err
	b.held.Store(&e)
}

// Resume ends Hold (or Fail) and refreshes the tool list at once, so that a change of the grant across
// the hold is listed without waiting for the next poll.
func (b *Bridge) Resume(ctx context.Context) error {
	b.held.Store(nil)
	if err := b.readLimits(ctx); err != nil {
		return err // the poll's refresh comes later; the bound read before stays
	}
	return b.refresh(ctx)
}

// Refresh reads the session's grant and the capabilities' availability once and changes the
// tool list to match (the poller does this every PollInterval). A failure to reach the daemon
// changes nothing.
func (b *Bridge) Refresh(ctx context.Context) error { return b.refresh(ctx) }

func (b *Bridge) refresh(ctx context.Context) error {
	want := map[string]toolSpec{}
	var d protocol.SessionDescription
	switch err := b.daemonCall(ctx, client.Command{Operation: protocol.OpDescribeSession, SessionID: b.cfg.SessionID}, &d); {
	case err == nil:
		for _, s := range grantedTools(&d.Record, b.cfg.Generation) {
			want[s.tool.Name] = s
		}
		if liveGeneration(&d.Record, b.cfg.Generation) && !d.HostDeniesProposals {
			for _, s := range proposalTools(sessionRules(d.Record.Policy.Rules)) {
				want[s.tool.Name] = s
			}
		}
		if id := sessionRoom(&d.Record, b.cfg.Generation); id != "" {
			specs, err := b.roomTools(ctx, id)
			if err != nil {
				return err
			}
			for _, s := range specs {
				want[s.tool.Name] = s
			}
		}
	case codeOf(err) != protocol.CodeSessionNotFound:
		return err // a deleted session has no tools; anything else keeps them
	}
	if len(b.cfg.Capabilities) > 0 {
		caps, err := b.capabilityTools(ctx)
		if err != nil {
			return err
		}
		for _, s := range caps {
			want[s.tool.Name] = s
		}
	}
	b.apply(want)
	return nil
}

// grantedTools are the fs tools of generation gen's grant, as the session's durable record
// holds it: none when the record is of another generation, or when the generation was closed
// (dormant and not quarantined). A generation a restart quarantined keeps its tools, whose
// calls answer the recovery code, because reopening it with the same grant restores them.
func grantedTools(rec *protocol.CatalogRecord, gen int64) []toolSpec {
	if !liveGeneration(rec, gen) || len(rec.Policy.ToolAdapter) == 0 {
		return nil
	}
	var sum tooladapter.Summary
	if json.Unmarshal(rec.Policy.ToolAdapter, &sum) != nil {
		return nil
	}
	limits, _ := json.Marshal(sum.Limits)
	var out []toolSpec
	rules := sessionRules(rec.Policy.Rules)
	for _, op := range sum.Operations {
		if t := fsTool(op, sum.Limits); t != nil {
			note := policyNote(rules, op)
			t.Description += note
			out = append(out, toolSpec{tool: t, kind: kindFS, operation: op, fingerprint: "fs\x00" + op + "\x00" + string(limits) + "\x00" + note})
		}
	}
	return append(out, composedTools(sum.Operations, sum.Limits, string(limits), rules)...)
}

// liveGeneration reports whether rec is generation gen, resident or quarantined by a restart.
func liveGeneration(rec *protocol.CatalogRecord, gen int64) bool {
	return rec.Generation == gen && (rec.Residency == protocol.Resident || rec.Recovery != nil)
}

// sessionRoom is the room whose publications generation gen of the session gets as tools
// (session open --room), or "".
func sessionRoom(rec *protocol.CatalogRecord, gen int64) string {
	if !liveGeneration(rec, gen) {
		return ""
	}
	return rec.Policy.Room
}

// roomTools lists what is published into room id now. A room this host has left or that
// closed, or a room service that is not running, has no tools; only a daemon out of reach
// keeps the tools as they are.
func (b *Bridge) roomTools(ctx context.Context, id string) ([]toolSpec, error) {
	var list struct {
		Capabilities []protocol.RoomCapability `json:"capabilities"`
	}
	err := b.daemonCall(ctx, client.Command{Operation: protocol.OpListRoomCapabilities, Payload: protocol.RoomPayload{Room: id}}, &list)
	switch {
	case err == nil:
		return roomTools(id, list.Capabilities), nil
	case codeOf(err) == CodeDaemonUnreachable:
		return nil, err
	default:
		b.log.Debug("no room tools", "room", id, "err", err)
		return nil, nil
	}
}

// capabilityTools lists the named capabilities that an adapter serves and whose adapter is
// ready, describing those it has not described yet (or whose summary changed).
func (b *Bridge) capabilityTools(ctx context.Context) ([]toolSpec, error) {
	var list struct {
		Capabilities []capclient.CapabilitySummary `json:"capabilities"`
	}
	if err := b.daemonCall(ctx, client.Command{Operation: protocol.OpListCapabilities}, &list); err != nil {
		return nil, err
	}
	b.mu.Lock()
	known := make(map[string]capadapter.Descriptor, len(b.descs))
	for k, v := range b.descs {
		known[k] = v
	}
	b.mu.Unlock()
	bases := capabilityBases(b.cfg.Capabilities)
	descs := map[string]capadapter.Descriptor{}
	var out []toolSpec
	for _, id := range b.cfg.Capabilities {
		i := slices.IndexFunc(list.Capabilities, func(c capclient.CapabilitySummary) bool { return c.CapabilityID == id })
		// A capability shown unavailable only because its last calls failed keeps its tools:
		// only a call can see it work again (capclient.UnavailableAfter).
		if i < 0 || (!list.Capabilities[i].Available && list.Capabilities[i].UnavailableReason != capclient.UnavailableCalls) {
			continue
		}
		sum := list.Capabilities[i]
		d, ok := known[id]
		if !ok || !sameSummary(d, sum) {
			var desc struct {
				Descriptor capadapter.Descriptor `json:"descriptor"`
			}
			err := b.daemonCall(ctx, client.Command{Operation: protocol.OpDescribeCapability, Payload: protocol.CapabilityPayload{CapabilityID: id}}, &desc)
			if err != nil {
				if codeOf(err) == CodeDaemonUnreachable {
					return nil, err
				}
				continue // removed or gone between the two calls: no tools this time
			}
			d = desc.Descriptor
		}
		descs[id] = d
		out = append(out, capabilityTools(d, bases[id])...)
	}
	b.mu.Lock()
	b.descs = descs
	b.mu.Unlock()
	return out, nil
}

func sameSummary(d capadapter.Descriptor, s capclient.CapabilitySummary) bool {
	if d.Title != s.Title || d.Version != s.Version || d.Observe != s.Observe || len(d.Actions) != len(s.Actions) {
		return false
	}
	for i, a := range d.Actions {
		if a.Name != s.Actions[i] {
			return false
		}
	}
	return true
}

// apply changes the server's tools to want: removed and changed tools go, new and changed
// tools come. The SDK sends one notifications/tools/list_changed for changes made together.
func (b *Bridge) apply(want map[string]toolSpec) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	var gone []string
	for _, name := range sortedNames(b.specs) {
		if w, ok := want[name]; !ok || w.fingerprint != b.specs[name].fingerprint {
			gone = append(gone, name)
			delete(b.specs, name)
		}
	}
	if len(gone) > 0 {
		b.srv.RemoveTools(gone...)
		b.log.Info("tools removed", "tools", gone)
	}
	var added []string
	for _, name := range sortedNames(want) {
		if _, ok := b.specs[name]; ok {
			continue
		}
		s := want[name]
		b.specs[name] = s
		b.srv.AddTool(s.tool, b.handler(s))
		added = append(added, name)
	}
	if len(added) > 0 {
		b.log.Info("tools added", "tools", added)
	}
}

// Tools returns the names of the tools listed now, sorted.
func (b *Bridge) Tools() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return sortedNames(b.specs)
}

// errClosed answers calls that arrive after Close.
var errClosed = errors.New("mcp: bridge closed")
