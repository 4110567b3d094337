package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/connlimit"
	"github.com/airlockhq/airlock/internal/loopback"
	"github.com/airlockhq/airlock/internal/mcp"
	"github.com/airlockhq/airlock/internal/protocol"
)

// HTTP server bounds of airlock mcp --http. A client's headers arrive at once; a tools/call
// may hold its response stream open as long as the adapter's deadline (at most 120 s), so
// there is no write timeout, and an idle keep-alive connection is dropped after a minute.
const (
	mcpReadHeaderTimeout = 10 * time.Second
	mcpIdleTimeout       = time.Minute
	mcpMaxHeaderBytes    = 64 << 10
	// mcpMaxConns bounds the open connections of --http, whose port any local user can
	// reach (internal/connlimit): a client's requests and its streams fit many times over.
	mcpMaxConns        = 64
	mcpShutdownTimeout = 5 * time.Second
)

// mcpServe runs the MCP bridge of one session generation:
// airlock mcp --session S --generation N [--caps ID,ID…] [--http ADDR [--listen]], or of a
// session of its own on a directory: airlock mcp --dir DIR [--ops …] [--caps …] […].
// On stdio the MCP session ends when the client closes stdin. Over HTTP the server runs until
// interrupted; the bearer token is printed once, on stderr.
//
// With --dir, airlock mcp opens a memory session whose grant of DIR airlockd mints from the
// airlock-fs it runs, with lifetime "connection": it lives exactly as long as this process's
// connection that opened it, so the client going away (stdin closed, the process killed)
// closes it and revokes the grant, and a daemon restart deletes it. It keeps serving across a
// restart and opens the session again, for up to --reopen-for (dirKeeper); when it gives up, a
// client on stdio gets the reason as the answer to each call until it closes stdin, and the
// exit (69, or 1 after a refusal) comes then.
//
// When it cannot start (no daemon on the socket, an unknown session, a refused open), an MCP
// client on stdio gets the reason, and how to fix it, as the error of each of its requests
// until it closes stdin (serveFailure), as well as stderr.
func (a *app) mcpServe(ctx context.Context, args []string) int {
	o, fs := a.newCommand("mcp")
	session := fs.String("session", "", "session id (this or --dir)")
	dir := fs.String("dir", "", "give the client this `directory`: a session of its own whose grant airlockd mints and revokes when the client goes (this or --session)")
	pol := fs.String("policy", "", "with --dir: the session's policy, a built-in `NAME` (allow-all, read-only, ask-writes, deny-all) or a policy FILE (a path with a /): a call it asks about waits for the operator (airlock approvals)")
	opsFlag := fs.String("ops", "", "with --dir: the operations to grant (default all six: "+strings.Join(defaultDirOps, ",")+")")
	// Not generationFlag's "(required)": --dir opens generation 1 of a session of its own.
	gen := fs.Int64("generation", 0, "with --session: the session generation (required with it)")
	caps := fs.String("caps", "", "comma-separated capability ids whose observe and actions become tools")
	httpAddr := fs.String("http", "", "serve Streamable HTTP on `host:port` instead of stdio (loopback only without --listen)")
	listen := fs.Bool("listen", false, "with --http: allow an address that is not loopback")
	reopenFor := fs.Duration("reopen-for", defaultReopenFor, "with --dir: when airlockd stops or restarts, keep serving and open the session again for up to this `duration` (0: give up at once)")
	poll := fs.Duration("poll", mcp.DefaultPollInterval, "how often to check the grant and the capabilities for changes")
	logLevel := fs.String("log-level", "warn", "stderr log level: debug, info, warn or error")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	switch {
	case (*session == "") == (*dir == ""):
		return a.failUsage(o, usageErrorf("give exactly one of --session and --dir"))
	case *dir != "" && isSet(fs, "generation"):
		return a.failUsage(o, usageErrorf("--generation goes with --session; --dir opens generation 1 of a session of its own"))
	case *dir == "" && *opsFlag != "":
		return a.failUsage(o, usageErrorf("--ops goes with --dir; a --session has its grant already"))
	case *dir == "" && *pol != "":
		return a.failUsage(o, usageErrorf("--policy goes with --dir; a --session has its policy already"))
	case *dir == "" && isSet(fs, "reopen-for"):
		return a.failUsage(o, usageErrorf("--reopen-for goes with --dir; a --session is reprovisioned by its operator after a restart"))
	case *reopenFor < 0:
		return a.failUsage(o, usageErrorf("--reopen-for must not be negative"))
	case *session != "":
		if err := checkGeneration(fs, *gen); err != nil {
			return a.failUsage(o, err)
		}
	}
	// A DIR that is not a directory is answered to a client on stdio, as a refused open is
	// (fail, below): a client configured with a directory since renamed shows why.
	var root string
	var dirErr error
	if *dir != "" {
		root, dirErr = canonicalDir(*dir)
	}
	if *poll < 100*time.Millisecond {
		return a.failUsage(o, usageErrorf("--poll must be at least 100ms"))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return a.failUsage(o, usageErrorf("--log-level: %v", err))
	}
	capIDs, err := parseCaps(*caps)
	if err != nil {
		return a.failUsage(o, err)
	}
	if *listen && *httpAddr == "" {
		return a.failUsage(o, usageErrorf("--listen needs --http"))
	}
	if *httpAddr != "" && !*listen && !loopback.Addr(*httpAddr) {
		return a.failUsage(o, usageErrorf("--http %s is not a loopback address; add --listen to serve it anyway", *httpAddr))
	}

	log := slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	var in io.ReadCloser
	polled := false
	if *httpAddr == "" {
		in, polled = pollable(a.stdin)
	}
	// fail reports a failure to start on stderr and, to a client on stdio, as the error of
	// each of its requests until it closes stdin.
	// toClient is whether a failure is answered to an MCP client on stdio (one on a terminal
	// is a person, who reads stderr).
	toClient := *httpAddr == "" && !isTerminal(a.stdin)
	fail := func(err error) int {
		err = mcpError(err)
		if toClient {
			err = withoutHint(err) // the start hint below says it for an MCP server
		}
		code := o.fail(err)
		if toClient {
			pe, unreachable := clientFailure(err)
			hint := ""
			if unreachable {
				hint = a.startHint()
				fmt.Fprintf(a.stderr, "airlock mcp: %s\n", hint)
			}
			serveFailure(ctx, in, a.stdout, pe, hint)
		}
		return code
	}
	if dirErr != nil {
		return fail(dirErr)
	}
	sctx, cancel := context.WithTimeout(ctx, callTimeout)
	sessionID, generation := *session, *gen
	var keeper *dirKeeper
	if root != "" {
		var err error
		keeper = &dirKeeper{a: a, id: newDirSessionID(), root: root, ops: parseOps(*opsFlag), reopenFor: *reopenFor, log: log}
		if *pol != "" {
			if keeper.pol, err = policyRef(*pol); err != nil {
				cancel()
				return a.failUsage(o, err)
			}
		}
		if keeper.cur, err = a.openDirSession(sctx, keeper.id, keeper.root, keeper.ops, keeper.pol); err != nil {
			cancel()
			return fail(err)
		}
		sessionID, generation = keeper.id, 1
	}
	held := 0
	if keeper != nil {
		held = 1 // the connection that holds the session, busy while it does
	}
	b, err := mcp.New(sctx, mcp.Config{Socket: a.socket, SessionID: sessionID, Generation: generation, Capabilities: capIDs,
		PollInterval: *poll, HeldConns: held, Logger: log})
	cancel()
	if err != nil {
		if keeper != nil {
			keeper.cur.close(context.WithoutCancel(ctx))
		}
		return fail(err)
	}
	defer b.Close()
	// stopped ends a --dir server's keeper and closes its session, which revokes its grant,
	// and returns why the keeper stopped the server before its client went, or nil. It runs
	// once, when serving has ended (or, deferred, on any other way out).
	stopped := func() error { return nil }
	if keeper != nil {
		serveCtx, stopServing := context.WithCancel(ctx)
		kctx, stopKeeping := context.WithCancel(ctx)
		kept := make(chan error, 1)
		go func() {
			err := keeper.keep(kctx, b)
			switch {
			case err == nil:
			case toClient:
				// The client on stdio gets why, with the start hint that the error carries,
				// as the answer to each call until it closes stdin; the exit says it then.
				pe, _ := clientFailure(err)
				pe.Retryable = false
				b.Fail(pe)
				log.Error("the session is lost for good: every call answers why until the client closes stdin", "err", err)
			default:
				stopServing()
			}
			kept <- err
		}()
		stopped = sync.OnceValue(func() error {
			stopKeeping()
			err := <-kept
			stopServing()
			if keeper.cur != nil {
				keeper.cur.close(context.WithoutCancel(ctx))
			}
			return err
		})
		defer stopped()
		ctx = serveCtx
	}

	if *httpAddr == "" {
		if polled && os.Getenv("GOMAXPROCS") == "" {
			// One session's calls pass from goroutine to goroutine: the SDK's stdin
			// reader, its connection's reader, its handler goroutines, the daemon
			// connection's reader and back. With a second P, each hand-off wakes another
			// thread to run the goroutine it readies; with one, the same thread runs it
			// next. On make bench-mcp's 2-core machine that cut the bridge's context
			// switches per call by about 40% and its CPU per call by a quarter to a half;
			// p50 fell 6–14% on the small rows at 1 call, 1–17% at 16, 17–23% on a 1 MiB
			// read, and stayed as it was for 16 of those at once (docs/mcp.md). It needs
			// stdin on the poller: with one P, a thread blocked in read(2) would hold the P,
			// and the goroutine it just readied, until the runtime's monitor took it back.
			// GOMAXPROCS set in the environment is left as it is.
			runtime.GOMAXPROCS(1)
		}
		// A line over the bound ends the session: the stream cannot be read in step again.
		// Every request read is answered before the end of stdin (or that line) ends the
		// session, within mcp.StdinDrainTimeout. The fs calls an agent makes most skip the
		// SDK (the fast path of mcp.Bridge.ServeStdio).
		err := b.ServeStdio(ctx, in, a.stdout, mcp.MaxMessageBytes, 0)
		switch {
		case err == nil, errors.Is(err, context.Canceled), errors.Is(err, io.EOF):
		case errors.Is(err, mcp.ErrLineTooLarge):
			// The client's input, not the daemon out of reach (69).
			return o.fail(protocolErrorf("%v", err))
		default:
			return o.fail(err)
		}
		return a.dirEnd(o, stopped())
	}

	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return o.fail(transportErrorf(exitUnavailable, "cannot listen on %s: %v", *httpAddr, err))
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	token := mcp.NewToken()
	srv := &http.Server{
		Handler:           b.HTTPHandler(mcp.HTTPConfig{Token: token, Port: port}),
		ReadHeaderTimeout: mcpReadHeaderTimeout,
		IdleTimeout:       mcpIdleTimeout,
		MaxHeaderBytes:    mcpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	fmt.Fprintf(a.stderr, "airlock mcp: serving session %s generation %d on http://%s%s\n", clean(sessionID), generation, ln.Addr(), mcp.HTTPPath)
	fmt.Fprintf(a.stderr, "airlock mcp: bearer token (shown once): %s\n", token)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(connlimit.New(ln, mcpMaxConns)) }()
	select {
	case err := <-served:
		return o.fail(transportErrorf(exitUnavailable, "http server: %v", err))
	case <-ctx.Done():
	}
	shctx, cancel := context.WithTimeout(context.Background(), mcpShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shctx); err != nil {
		srv.Close()
	}
	<-served
	return a.dirEnd(o, stopped())
}

// parseCaps reads --caps: comma-separated capability ids, blanks ignored. A word that is no
// capability id, or an id named twice, is a usage error: a repeated id would list its tools
// under the hashed names meant for two ids that clash (capabilityBases), as if it were two
// (airlock mcp config --ops refuses a repeated operation likewise).
func parseCaps(s string) ([]string, error) {
	var ids []string
	for c := range strings.SplitSeq(s, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		if (&protocol.CapabilityPayload{CapabilityID: c}).Validate() != nil {
			return nil, usageErrorf("--caps: %q is not a capability id", c)
		}
		if slices.Contains(ids, c) {
			return nil, usageErrorf("--caps names %s twice", c)
		}
		ids = append(ids, c)
	}
	return ids, nil
}

// dirEnd is the exit of a server that stopped serving: success when its client went (or it
// was interrupted), and for a --dir server whose session could not be kept (dirKeeper.keep),
// why: 69 when airlockd did not take it back in time, 1 when it refused to.
func (a *app) dirEnd(o *output, lost error) int {
	if lost != nil {
		return o.fail(lost)
	}
	return exitOK
}

// clientFailure is err as an MCP client is told it, and whether it is a daemon out of reach,
// which the client sees under the bridge's code for it, not the CLI's transport class.
func clientFailure(err error) (*protocol.Error, bool) {
	ce := classify(err)
	pe := ce.body
	unreachable := ce.exit == exitUnavailable
	if unreachable {
		pe.Code = mcp.CodeDaemonUnreachable
	}
	return &pe, unreachable
}

// mcpError gives a bridge that could not reach the daemon the CLI's unreachable exit.
func mcpError(err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Code == mcp.CodeDaemonUnreachable {
		return transportErrorf(exitUnavailable, "%s", pe.Message)
	}
	return err
}

// pollable returns stdin as a reader that the runtime's network poller serves, and true, when
// it is a pipe or a socket (as MCP clients start a server): a read that waits parks its
// goroutine instead of holding a thread in read(2), and closing it ends that read. A pipe is
// opened again through /proc, so that the non-blocking flag is set on a file description of
// this process's own, not on the one it may share with its parent; a socket is this end of
// the client's socket pair. Anything else (a terminal, a file, no /proc) is read as it is.
func pollable(in io.Reader) (io.ReadCloser, bool) {
	f, ok := in.(*os.File)
	if !ok {
		return io.NopCloser(in), false
	}
	st, err := f.Stat()
	if err != nil {
		return io.NopCloser(in), false
	}
	switch {
	case st.Mode()&os.ModeNamedPipe != 0:
		p, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			return p, true
		}
	case st.Mode()&os.ModeSocket != 0:
		if c, err := net.FileConn(f); err == nil {
			return c, true
		}
	}
	return io.NopCloser(in), false
}
