package daemon

// This file owns the airlock-fs that airlockd runs itself (the managed adapter): starting and
// supervising the child, minting grants for opens of tools mode "airlock-fs", and revoking
// them when their generation ends.
//
// Design. A grant of the operator's own airlock-fs needs its host id piped by hand and
// outlives its session unless someone revokes it; the daemon can do both itself when it holds
// the adapter's admin socket. So airlockd starts `airlock-fs serve --exit-on-stdin-eof` as its
// child, on first use (a daemon that never opens a managed grant runs no extra process), with
// both sockets in a private 0700 directory beside the owner socket, and restarts it with a
// bounded backoff when it exits. The child's stdin is a pipe the daemon holds open and it is
// started with a parent-death signal, so it never outlives the daemon however the daemon ends
// (kill -9 included): a new daemon starts a new child, whose memory holds no grant. Its stderr
// goes to the daemon's log, a line at a time; airlock-fs never logs a handle.
//
// A managed open mints a grant named by the daemon (grantId "d-…"), so that the daemon can
// revoke exactly it even when the answer never came. The grant is tracked under its session
// generation before the open runs; an open that fails or does not bind it (a reuse of the
// generation's live connection) revokes it at once, and the end of the generation (a close, a
// delete, a replacing open: session.Config.GenerationEnded) revokes every grant of it and of
// older generations. A grant of an operator-run airlock-fs is not the daemon's to revoke: it
// holds no admin socket for it.
//
// A child that exits takes its grants with it, while their sessions go on. A grant's life is
// its session's (DESIGN.md), so the daemon grants them again itself: the generations whose
// grants the child held are remembered (lost), and once the next child answers, each is given a
// new grant of its cwd for the operations it held, bound in place of the connection that failed
// (restore, Server.regrant, session.Manager.Regrant), as a reopen of the same generation would
// bind it. So every session keeps working across a crash of the child, whoever opened it and
// whichever door calls it (airlock mcp --dir, whose session is held by a connection that never
// closed; an operator's session behind airlock mcp --session; invokeTool; a turn started after
// the rebind), and no client has to tell a restarted child from a session that ended. Until
// then an invokeTool of such a generation answers fs_adapter_unavailable, retryable (awaiting),
// not adapter_session_closed, which tells a model the session has ended for good. A turn
// already running keeps the tools it took at its start, so its later calls still fail on the
// old connection; the next turn has the new grant. A regrant that
// fails (the cwd is gone, the new child has another adapter version, …) revokes what it minted
// and leaves the generation's calls answering adapter_session_closed; one cut off by the child
// exiting again waits for the next child, and one that failed retryably is tried again after a
// backoff while this child is up. Only generations the daemon minted for are restored:
// an operator-run airlock-fs's grants are the operator's to grant again.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/fsadapter/server"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// ManagedFSConfig configures the airlock-fs that airlockd runs itself.
type ManagedFSConfig struct {
	// Binary is the airlock-fs executable. Empty runs none: managed opens are refused
	// fs_adapter_unavailable with Disabled as the reason.
	Binary string
	// Disabled says why there is no Binary ("disabled by --no-fs-adapter", …).
	Disabled string
	// Dir is the private directory of its sockets (default: the owner socket's path with
	// ".fs" appended).
	Dir string
	// StartTimeout bounds how long a managed open waits for the child's admin socket
	// (default 10 s).
	StartTimeout time.Duration
}

// CodeFSAdapterUnavailable refuses a managed open when airlockd runs no airlock-fs, or the one
// it runs is not up within the start timeout (retryable then).
const CodeFSAdapterUnavailable = "fs_adapter_unavailable"

// Managed-adapter bounds.
const (
	managedStartTimeout = 10 * time.Second
	managedAdminTimeout = 5 * time.Second // one admin request, dial to answer
	managedStopTimeout  = 5 * time.Second // from closing its stdin to SIGKILL
	managedBackoffMin   = 100 * time.Millisecond
	managedBackoffMax   = 30 * time.Second
	managedStableAfter  = time.Minute // a child up this long restarts without backoff
	managedLogLineBytes = 16 << 10
	managedAnswerBytes  = 1 << 20 // a descriptor or a revoke answer is far smaller
)

// managedFS is the daemon's airlock-fs: the supervised child and the grants minted from it.
type managedFS struct {
	cfg    ManagedFSConfig
	hostID string
	log    *slog.Logger
	socket string // serving socket: the descriptors' endpoint
	admin  string

	// mu guards the fields below.
	mu      sync.Mutex
	started bool          // the supervisor runs
	up      chan struct{} // closed while a child answers on its admin socket; replaced when it goes
	stopped bool
	stop    chan struct{} // closed by close
	done    chan struct{} // closed when the supervisor has ended
	// grants are the daemon-minted grants of each session generation: session → generation →
	// grant ids.
	grants map[string]map[int64][]string
	// lost are the session generations whose grants went with a child that exited, until the
	// next child has granted them again (restore) or they end (sessionEnded).
	lost map[generationKey]bool
	// exited is closed when the current (or last) child exits; nil before the first one.
	exited <-chan struct{}
	// settled are the failed adapter connections (by their failure) of generations whose
	// child outlived awaiting's wait: the failure was not the child's exit, so later calls are
	// answered without waiting again. Cleared when a child exits.
	settled map[generationKey]*protocol.Error
	// regrant grants one lost generation again from the child that is up now (Server.regrant);
	// it reports whether it bound a new grant. Set once, before the first mint.
	regrant func(ctx context.Context, sessionID string, generation int64) (bool, *protocol.Error)
	// regrantBackoff is restore's first backoff (default managedBackoffMin); tests shorten it.
	regrantBackoff time.Duration
}

// generationKey names one session generation.
type generationKey struct {
	session    string
	generation int64
}

func newManagedFS(cfg ManagedFSConfig, ownerSocket, hostID string, log *slog.Logger) *managedFS {
	if cfg.Dir == "" {
		cfg.Dir = ownerSocket + ".fs"
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = managedStartTimeout
	}
	return &managedFS{
		cfg: cfg, hostID: hostID, log: log.With("component", "airlock-fs"),
		socket: filepath.Join(cfg.Dir, "fs.sock"), admin: filepath.Join(cfg.Dir, "admin.sock"),
		up: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
		grants: make(map[string]map[int64][]string), lost: make(map[generationKey]bool),
		settled: make(map[generationKey]*protocol.Error),
	}
}

// unavailable is the refusal of a managed open that cannot be served now.
func (m *managedFS) unavailable(retryable bool, format string, args ...any) *protocol.Error {
	e := protocol.Errorf(CodeFSAdapterUnavailable, format, args...)
	e.Retryable = retryable
	return e.With("field", "payload.resources.tools.mode")
}

// ready starts the supervisor if it does not run yet and waits until the child answers.
func (m *managedFS) ready(ctx context.Context) *protocol.Error {
	if m.cfg.Binary == "" {
		return m.unavailable(false, "airlockd runs no airlock-fs (%s); grant a descriptor of one you run instead", m.cfg.Disabled)
	}
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return m.unavailable(true, "airlockd is stopping")
	}
	if !m.started {
		m.started = true
		go m.supervise()
	}
	up := m.up
	m.mu.Unlock()
	t := time.NewTimer(m.cfg.StartTimeout)
	defer t.Stop()
	select {
	case <-up:
		return nil
	case <-t.C:
		return m.unavailable(true, "airlockd's airlock-fs did not start within %v (airlockd's log says why)", m.cfg.StartTimeout)
	case <-ctx.Done():
		return m.unavailable(true, "the open ended before airlockd's airlock-fs was up")
	}
}

// supervise runs the child until close, restarting it with a bounded backoff.
func (m *managedFS) supervise() {
	defer close(m.done)
	backoff := managedBackoffMin
	for {
		began := time.Now()
		err := m.runChild()
		select {
		case <-m.stop:
			return
		default:
		}
		if time.Since(began) >= managedStableAfter {
			backoff = managedBackoffMin
		}
		m.log.Warn("airlock-fs exited; its grants are gone; restarting", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-m.stop:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, managedBackoffMax)
	}
}

// runChild starts one child, marks it up once its admin socket answers, and returns when it
// exits or close stops it.
func (m *managedFS) runChild() error {
	if err := os.MkdirAll(m.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	stdin, lifeline, err := os.Pipe()
	if err != nil {
		return err
	}
	stderr, logw, err := os.Pipe()
	if err != nil {
		stdin.Close()
		lifeline.Close()
		return err
	}
	cmd := exec.Command(m.cfg.Binary, "serve", "--socket", m.socket, "--admin-socket", m.admin,
		"--exit-on-stdin-eof", "--log-format", "json")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, nil, logw
	cmd.Dir = "/"
	// The lifeline (its stdin) covers every way the daemon ends; the signal covers a child
	// that stopped reading it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	stdin.Close()
	logw.Close()
	if err != nil {
		lifeline.Close()
		stderr.Close()
		return fmt.Errorf("start %s: %w", m.cfg.Binary, err)
	}
	m.log.Info("airlock-fs started", "pid", cmd.Process.Pid, "socket", m.socket)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		m.copyLog(stderr)
	}()
	var werr error
	waited := make(chan struct{})
	go func() {
		werr = cmd.Wait()
		close(waited)
	}()
	m.mu.Lock()
	m.exited = waited
	m.mu.Unlock()

	// Up once the admin socket answers; the child exiting, or close, ends the wait.
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, e := m.call(&server.AdminRequest{Op: server.OpGrants}); e == nil {
				m.mu.Lock()
				close(m.up)
				m.mu.Unlock()
				m.restore(waited)
				return
			}
			select {
			case <-waited:
				return
			case <-m.stop:
				return
			case <-tick.C:
			}
		}
	}()

	select {
	case <-waited:
	case <-m.stop:
		lifeline.Close()
		t := time.NewTimer(managedStopTimeout)
		select {
		case <-waited:
		case <-t.C:
			_ = cmd.Process.Kill()
			<-waited
		}
		t.Stop()
	}
	<-probed
	lifeline.Close()
	<-logged
	m.mu.Lock()
	select {
	case <-m.up:
		m.up = make(chan struct{})
	default:
	}
	// Its grants died with it: nothing is left to revoke, and their generations are granted
	// again once the next child is up.
	for id, gens := range m.grants {
		for g := range gens {
			m.lost[generationKey{id, g}] = true
		}
	}
	clear(m.grants)
	clear(m.settled)
	m.mu.Unlock()
	return werr
}

// Bounds of the restore of one generation. managedRegrantTimeout bounds one attempt, a mint
// (one admin request) and the binding of the new grant, from when the session's lock is taken
// (session.Manager.Regrant), so that an open holding it does not use up the attempt. An attempt
// that failed retryably (an admin request timed out on a loaded child, the host not ready, …)
// is tried again after a backoff doubling from managedBackoffMin to managedRegrantBackoffMax.
const (
	managedRegrantTimeout    = 2 * managedAdminTimeout
	managedRegrantBackoffMax = 10 * time.Second
)

// restore grants every lost generation again, from the child that has just come up; exited is
// closed when that child exits. It returns when no generation is left to try, the child
// exited (what is left stays lost, for the next child) or close stopped the daemon. A
// generation whose regrant failed because the child went, or retryably while it stays up,
// stays lost and is tried again: the first by the next child, the second after a backoff
// while this one is up. Any other outcome ends its wait: bound, nothing to repair (it was
// closed, replaced, or reopened meanwhile), or refused for good (the cwd is gone, another
// adapter version). It runs on the goroutine runChild owns and waits for.
func (m *managedFS) restore(exited <-chan struct{}) {
	if m.regrant == nil {
		return
	}
	backoff := m.regrantBackoff
	if backoff <= 0 {
		backoff = managedBackoffMin
	}
	for {
		m.mu.Lock()
		keys := slices.Collect(maps.Keys(m.lost))
		m.mu.Unlock()
		again := false
		for _, k := range keys {
			select {
			case <-m.stop:
				return
			case <-exited:
				return
			default:
			}
			bound, e := m.regrant(context.Background(), k.session, k.generation)
			gone := false
			select {
			case <-exited:
				gone = e != nil
			default:
			}
			retry := e != nil && !gone && e.Retryable
			m.mu.Lock()
			if !gone && !retry {
				delete(m.lost, k)
			}
			m.mu.Unlock()
			switch {
			case bound:
				m.log.Info("grant restored after airlock-fs restarted", "sessionId", k.session, "generation", k.generation)
			case retry:
				m.log.Warn("grant not restored yet after airlock-fs restarted; retrying",
					"sessionId", k.session, "generation", k.generation, "code", e.Code, "in", backoff)
			case e != nil:
				m.log.Warn("grant not restored after airlock-fs restarted; the session's calls fail adapter_session_closed",
					"sessionId", k.session, "generation", k.generation, "code", e.Code, "retryLater", gone)
			}
			again = again || retry
		}
		if !again {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-m.stop:
			t.Stop()
			return
		case <-exited:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, managedRegrantBackoffMax)
	}
}

// managedExitWait bounds how long awaiting waits for the child to exit after a connection of
// one of its grants ended: the connection sees the child's death before the supervisor does.
// A child still up after it did not cause the failure.
const managedExitWait = 1500 * time.Millisecond

// awaiting reports whether a call of generation of session id, whose adapter connection failed
// with cause, is to be answered as waiting for the grant to be restored: the daemon minted the
// generation's grant and the child holding it exited (lost), or the connection's transport
// ended while the grant is tracked and the child exits within managedExitWait (the supervisor
// has not seen it yet). A connection that ended while its child stayed up (the child closed it
// on a protocol violation or a revoke, or a write to a slow child timed out) is not repaired
// by a restart, so its calls keep the connection's own answer (adapter_session_closed); the
// wait is paid once per failure (settled). It may block for managedExitWait.
func (m *managedFS) awaiting(id string, generation int64, cause *protocol.Error) bool {
	k := generationKey{id, generation}
	m.mu.Lock()
	lost, tracked, settled, exited := m.lost[k], len(m.grants[id][generation]) > 0, m.settled[k] == cause, m.exited
	m.mu.Unlock()
	if lost {
		return true
	}
	ended := cause.Code == tooladapter.CodeConnectionClosed || cause.Code == tooladapter.CodeConnectionFailed
	if !ended || !tracked || exited == nil {
		return false
	}
	if settled {
		select {
		case <-exited:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(managedExitWait)
	defer t.Stop()
	select {
	case <-exited:
		return true
	case <-t.C:
	}
	m.mu.Lock()
	if m.exited == exited {
		m.settled[k] = cause
	}
	m.mu.Unlock()
	return false
}

// awaitingError answers a call while its generation's grant waits to be restored.
func awaitingError() *protocol.Error {
	return protocol.Retryable(CodeFSAdapterUnavailable,
		"airlockd's airlock-fs exited and took this session's grant with it; airlockd grants the session its directory again once it has restarted it").
		With("indeterminate", false)
}

// copyLog writes the child's stderr into the daemon's log, a line at a time; a line longer
// than managedLogLineBytes is cut.
func (m *managedFS) copyLog(r *os.File) {
	defer r.Close()
	br := bufio.NewReaderSize(r, managedLogLineBytes)
	skipping := false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && !skipping {
			m.log.Info("airlock-fs log", "line", string(trimNL(line)))
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			skipping = true
		case err != nil:
			return
		default:
			skipping = false
		}
	}
}

func trimNL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}

// close stops the child and the supervisor: the child's stdin is closed, and it is killed if
// it has not stopped within managedStopTimeout.
func (m *managedFS) close() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	started := m.started
	close(m.stop)
	m.mu.Unlock()
	if started {
		<-m.done
	}
}

// mint grants root to a session generation for ops and returns the descriptor and the
// grant's id. The grant is tracked under its generation before this returns, so that the
// generation's end revokes it whatever happens to the open; the caller revokes it (drop) when
// the open does not bind it.
func (m *managedFS) mint(ctx context.Context, sessionID string, generation int64, root string, ops []string) (json.RawMessage, string, *protocol.Error) {
	if e := m.ready(ctx); e != nil {
		return nil, "", e
	}
	id := "d-" + newID()
	m.mu.Lock()
	gens := m.grants[sessionID]
	if gens == nil {
		gens = make(map[int64][]string)
		m.grants[sessionID] = gens
	}
	gens[generation] = append(gens[generation], id)
	m.mu.Unlock()
	host, gen := m.hostID, generation
	raw, e := m.call(&server.AdminRequest{Op: server.OpGrant, Root: &root, HostInstanceID: &host, SessionID: &sessionID,
		Generation: &gen, Operations: &ops, GrantID: &id})
	if e != nil {
		// The grant may exist though the answer did not come: revoke it by its name.
		m.drop(sessionID, generation, id, "mint failed")
		return nil, "", mintError(e)
	}
	m.log.Info("grant minted", "grant", id, "sessionId", sessionID, "generation", generation, "operations", ops)
	return raw, id, nil
}

// mintError gives an admin refusal the field of the open that caused it.
func mintError(e *protocol.Error) *protocol.Error {
	if f, ok := e.Details["field"].(string); ok {
		switch f {
		case "root":
			e.Details["field"] = "payload.cwd"
		case "operations":
			e.Details["field"] = "payload.resources.tools.operations"
		}
	}
	if e.Code == server.CodeRootInvalid {
		e.Details["field"] = "payload.cwd"
	}
	return e
}

// drop revokes one grant minted for a generation and forgets it; why is for the log.
func (m *managedFS) drop(sessionID string, generation int64, id, why string) {
	m.mu.Lock()
	if gens := m.grants[sessionID]; gens != nil {
		ids := gens[generation]
		for i, x := range ids {
			if x == id {
				gens[generation] = append(ids[:i:i], ids[i+1:]...)
				break
			}
		}
		if len(gens[generation]) == 0 {
			delete(gens, generation)
		}
		if len(gens) == 0 {
			delete(m.grants, sessionID)
		}
	}
	m.mu.Unlock()
	m.revoke(id, why)
}

// sessionEnded revokes the grants of generation of session id and of every older one: they
// will never be resident again.
func (m *managedFS) sessionEnded(id string, generation int64) {
	m.mu.Lock()
	var ids []string
	if gens := m.grants[id]; gens != nil {
		for g, gids := range gens {
			if g <= generation {
				ids = append(ids, gids...)
				delete(gens, g)
			}
		}
		if len(gens) == 0 {
			delete(m.grants, id)
		}
	}
	for k := range m.lost {
		if k.session == id && k.generation <= generation {
			delete(m.lost, k)
		}
	}
	for k := range m.settled {
		if k.session == id && k.generation <= generation {
			delete(m.settled, k)
		}
	}
	m.mu.Unlock()
	for _, gid := range ids {
		m.revoke(gid, "session generation ended")
	}
}

// revoke ends one grant; a grant that is gone already (its child restarted) is no error.
func (m *managedFS) revoke(id, why string) {
	_, e := m.call(&server.AdminRequest{Op: server.OpRevokeGrant, GrantID: &id})
	switch {
	case e == nil:
		m.log.Info("grant revoked", "grant", id, "why", why)
	case e.Code == server.CodeGrantNotFound:
	default:
		// The child is gone or wedged: its grants go with it, and a wedged child is
		// replaced when it exits.
		m.log.Warn("grant revoke failed", "grant", id, "code", e.Code)
	}
}

// call sends one admin request to the child and returns the answer's data.
func (m *managedFS) call(req *server.AdminRequest) (json.RawMessage, *protocol.Error) {
	ctx, cancel := context.WithTimeout(context.Background(), managedAdminTimeout)
	defer cancel()
	unreachable := func(what string) *protocol.Error {
		return protocol.Retryable(CodeFSAdapterUnavailable, "airlockd's airlock-fs %s", what)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", m.admin)
	if err != nil {
		return nil, unreachable("is not answering")
	}
	defer nc.Close()
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	line, err := ndjson.Marshal(req)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "admin request not serializable")
	}
	if _, err := nc.Write(line); err != nil {
		return nil, unreachable("closed the admin connection")
	}
	answer, err := ndjson.NewReader(io.LimitReader(nc, managedAnswerBytes+1), managedAnswerBytes).Next()
	if err != nil {
		return nil, unreachable("did not answer")
	}
	var resp struct {
		OK    bool            `json:"ok"`
		Data  json.RawMessage `json:"data"`
		Error *protocol.Error `json:"error"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil || (!resp.OK && resp.Error == nil) {
		return nil, unreachable("answered out of protocol")
	}
	if !resp.OK {
		if resp.Error.Details == nil {
			resp.Error.Details = map[string]any{}
		}
		return nil, resp.Error
	}
	return resp.Data, nil
}

// regrant is the managed adapter's restore of one generation (managedFS.regrant): a new grant
// of the generation's cwd for the operations it held, minted from the child that is up now and
// bound in place of the connection that failed (session.Manager.Regrant). A grant it minted and
// did not bind is revoked. It is recorded as the open's grant is, as session.grant (adapter
// airlock-fs), at door daemon.
func (s *Server) regrant(ctx context.Context, id string, generation int64) (bool, *protocol.Error) {
	minted := ""
	bound, e := s.sessions.Regrant(ctx, id, generation, managedRegrantTimeout, func(ctx context.Context, cwd string, ops []string) (*tooladapter.Descriptor, *protocol.Error) {
		raw, gid, e := s.fsys.mint(ctx, id, generation, cwd, ops)
		if e != nil {
			return nil, e
		}
		minted = gid
		return tooladapter.ParseDescriptor(raw, tooladapter.Binding{HostInstanceID: s.hostID, SessionID: id, Generation: generation})
	})
	if minted != "" && !bound {
		s.fsys.drop(id, generation, minted, "regrant did not bind it")
	}
	if bound || e != nil {
		s.auditEvent(audit.KindEvent, audit.DoorDaemon, audit.Actor{Session: id, Generation: uint64(generation)},
			audit.Target{Op: "session.grant", Adapter: "airlock-fs"}, codeOf(e))
	}
	return bound, e
}
