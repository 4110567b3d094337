package main

// This file holds the one-command forms of airlock mcp: --dir (a session of its own, whose
// grant airlockd mints and whose life is this process's), the failure server that a client
// sees when airlock mcp cannot start, and airlock mcp config.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/mcp"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// defaultDirOps are the operations airlock mcp --dir grants without --ops: all six, as the
// reference filesystem server grants reading and writing by default. Writes stay confined
// to DIR by both layers and are guarded by the file's digest; --ops fs.read,fs.list,fs.stat,
// fs.search gives a read-only folder.
var defaultDirOps = []string{tooladapter.OpRead, tooladapter.OpList, tooladapter.OpStat, tooladapter.OpSearch,
	tooladapter.OpWrite, tooladapter.OpEdit}

// dirSession is the session airlock mcp --dir opened: its id and the connection that owns it.
// The daemon closes and deletes the session, and revokes its grant, when owner closes, so it
// must stay open exactly as long as the MCP server serves.
type dirSession struct {
	id    string
	owner *client.Client
}

// canonicalDir makes dir absolute, resolves its symbolic links and checks that it is a
// directory: the grant root and the session's cwd are this path.
func canonicalDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usageErrorf("--dir: %v", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if strings.HasPrefix(dir, "~") {
			// A client's configuration runs no shell: "~/work" reaches us as it is.
			return "", usageErrorf("--dir %s: %v (a client's configuration runs no shell, so ~ is not expanded: give an absolute path, as airlock mcp config prints)", abs, errors.Unwrap(err))
		}
		return "", usageErrorf("--dir %s: %v", abs, errors.Unwrap(err))
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.IsDir() {
		return "", usageErrorf("--dir %s is not a directory", abs)
	}
	return real, nil
}

// parseOps reads --ops: comma-separated operation names, defaultDirOps when empty.
func parseOps(s string) []string {
	if strings.TrimSpace(s) == "" {
		return append([]string(nil), defaultDirOps...)
	}
	var ops []string
	for op := range strings.SplitSeq(s, ",") {
		if op = strings.TrimSpace(op); op != "" {
			ops = append(ops, op)
		}
	}
	return ops
}

// policyRef is an open's policy member for --policy: a built-in NAME, or a FILE (a path
// with a /) made absolute, which the daemon reads.
func policyRef(pol string) (json.RawMessage, error) {
	ref := protocol.PolicyRef{Name: pol}
	if strings.Contains(pol, "/") {
		abs, err := filepath.Abs(pol)
		if err != nil {
			return nil, usageErrorf("--policy: %v", err)
		}
		ref = protocol.PolicyRef{File: abs}
	}
	return json.Marshal(ref)
}

// newDirSessionID is the id of airlock mcp --dir's session: "mcp-" and 12 hex digits.
func newDirSessionID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}

// openDirSession opens generation 1 of memory session id on dir, whose grant of ops the
// daemon mints from its own airlock-fs, with lifetime "connection": the session, and the
// grant, end when the returned owner connection does, however this process ends. pol, when
// not nil, is the session's policy member.
func (a *app) openDirSession(ctx context.Context, id, dir string, ops []string, pol json.RawMessage) (*dirSession, error) {
	owner, err := a.dial(ctx, protocol.Version2)
	if err != nil {
		return nil, err
	}
	opsJSON, _ := json.Marshal(ops)
	mode, _ := json.Marshal(protocol.ToolsManagedFS)
	tools, _ := json.Marshal(protocol.ToolsResource{Mode: mode, Operations: opsJSON})
	lifetime, _ := json.Marshal(protocol.LifetimeConnection)
	name := "airlock mcp " + filepath.Base(dir)
	if len([]rune(name)) > protocol.MaxNameLen {
		name = string([]rune(name)[:protocol.MaxNameLen])
	}
	p := &protocol.OpenPayload{
		Cwd: dir, Name: &name, Session: &protocol.OpenSession{Mode: protocol.ModeMemory}, Lifetime: lifetime,
		Resources: &protocol.OpenResource{
			Extensions: resourceNone, Skills: resourceNone, PromptTemplates: resourceNone,
			Themes: resourceNone, ContextFiles: resourceNone, Tools: tools,
		},
	}
	p.Policy = pol
	data, err := exchange(ctx, owner, client.Command{Operation: protocol.OpOpen, SessionID: id, Generation: new(int64(1)), Payload: p})
	var res protocol.OpenResult
	if err == nil {
		err = decodeData(data, &res)
	}
	if err == nil && !res.Created {
		// The daemon opened a generation that exists, and its owner is the connection that
		// created it, not this one (daemon.Server.open): this connection's end would not end
		// it, and the owner's end would, under this process. At a reopen that is the old
		// owner, not closed by the daemon yet (an earlier attempt timed out after the daemon
		// had taken it, or the connection ended on this side only): its close deletes the
		// session, and a later attempt creates it. At the start, with a random id, it is a
		// collision that nothing can take back.
		err = protocol.Retryable(protocol.CodeSessionBusy, "session %s is open already, owned by another connection", id)
	}
	if err != nil {
		owner.Close()
		return nil, err
	}
	return &dirSession{id: id, owner: owner}, nil
}

// close ends the session at once (its grant is revoked before this returns) and the owner
// connection; closing the connection alone would end both too, a moment later.
func (s *dirSession) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, _ = exchange(ctx, s.owner, client.Command{Operation: protocol.OpClose, SessionID: s.id, Generation: new(int64(1)),
		Payload: protocol.ClosePayload{RetainSession: new(false)}})
	s.owner.Close()
}

// startHint is the sentence that tells the reader of a failure how to start the daemon this
// airlock mcp looked for.
func (a *app) startHint() string {
	return startDaemonHint(a.socket) + ", then restart this MCP server"
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// isTerminal reports whether r is a terminal, where a person reads the failure on stderr and
// no MCP client is waiting for an answer.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// failureErrorCode is the JSON-RPC code of every answer of the failure server: the server
// could not do what it is for. It is not -32000, which the TypeScript SDK's clients name
// "connection closed".
const failureErrorCode = jsonrpc.CodeInternalError

// serveFailure answers an MCP client on stdio when airlock mcp cannot serve: every request,
// initialize first, gets a JSON-RPC error whose message is the failure and what to do about
// it, and whose data carries airlock's code; notifications are dropped (mcp.ServeFailure).
// Clients show that message where a server that just exits shows only "connection closed".
// It returns when the client closes stdin or ctx ends.
func serveFailure(ctx context.Context, in io.ReadCloser, out io.Writer, pe *protocol.Error, hint string) {
	msg := "airlock mcp: " + pe.Code + ": " + pe.Message
	if hint != "" {
		msg += "; " + hint
	}
	data, _ := json.Marshal(map[string]any{"code": pe.Code, "retryable": pe.Retryable})
	_ = mcp.ServeFailure(ctx, in, out, mcp.MaxMessageBytes, &jsonrpc.Error{Code: failureErrorCode, Message: msg, Data: data})
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Clients that airlock mcp config writes for.
const (
	configJSON   = "json"
	configClaude = "claude"
	configCodex  = "codex"
	configGemini = "gemini"
)

var (
	serverNameUnsafe = regexp.MustCompile(`[^A-Za-z0-9_-]+`)
	serverName       = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)
)

// defaultServerName is the client's name for a server of dir: "airlock-" and the directory's
// name in the letters, digits, '_' and '-' every client takes (others become '-'), cut to the
// name's 64 characters; "airlock" for a name with none of them ("/", "données" is "donn-es").
func defaultServerName(dir string) string {
	slug := strings.Trim(serverNameUnsafe.ReplaceAllString(filepath.Base(dir), "-"), "-")
	if slug == "" {
		return "airlock"
	}
	return strings.TrimRight(("airlock-" + slug)[:min(64, len("airlock-")+len(slug))], "-")
}

// checkDirOps refuses, at airlock mcp config, the operations that airlock mcp --dir's open
// would be refused for when the client starts it (by the daemon, or by the airlock-fs that
// mints the grant: tooladapter's checkOperations): none, one that is not a filesystem
// operation, or one named twice.
func checkDirOps(ops []string) error {
	if len(ops) == 0 {
		return usageErrorf("--ops names no operation")
	}
	for i, op := range ops {
		if !slices.Contains(tooladapter.Operations, op) {
			return usageErrorf("--ops: %q is not an operation; they are %s", op, strings.Join(tooladapter.Operations, ", "))
		}
		if slices.Contains(ops[:i], op) {
			return usageErrorf("--ops names %s twice", op)
		}
	}
	return nil
}

// checkPolicyName refuses, at airlock mcp config, a --policy NAME that no built-in policy has,
// which the daemon would refuse (invalid_policy) when the client starts airlock mcp. A FILE
// (a path with a /) is not read here: the daemon reads it at every open, as it is then
// (airlock policy check FILE checks it).
func checkPolicyName(pol string) error {
	if strings.Contains(pol, "/") || slices.Contains(policy.Names(), pol) {
		return nil
	}
	return usageErrorf("--policy: no built-in policy is named %q (they are %s); a policy FILE is a path with a /",
		pol, strings.Join(policy.Names(), ", "))
}

// mcpConfig prints a client configuration that runs airlock mcp --dir DIR with every path
// absolute and the daemon's socket named, so that a client's reduced environment (no
// XDG_RUNTIME_DIR, no PATH of the shell, another working directory) cannot lose the daemon:
// airlock mcp config --dir DIR [--client json|claude|codex|gemini] [--name N] [--ops …] [--caps …]
// [--policy NAME|FILE] [--reopen-for D]. What airlock mcp would refuse at the client's start,
// it refuses now.
func (a *app) mcpConfig(ctx context.Context, args []string) int {
	o, fs := a.newCommand("mcp config")
	dir := fs.String("dir", "", "the directory to give the client (required)")
	which := fs.String("client", configJSON, "what to print, for the `client` named: json (an mcpServers object, for Claude Desktop, Cursor, VS Code, …), or claude, codex or gemini (that CLI's mcp add line)")
	name := fs.String("name", "", "the server's name in the client (default airlock-DIRNAME)")
	ops := fs.String("ops", "", "operations to grant (default all six: "+strings.Join(defaultDirOps, ",")+")")
	caps := fs.String("caps", "", "comma-separated capability ids whose observe and actions become tools")
	pol := fs.String("policy", "", "the session's policy, a built-in `NAME` ("+strings.Join(policy.Names(), ", ")+") or a policy FILE (a path with a /, made absolute)")
	reopenFor := fs.Duration("reopen-for", defaultReopenFor, "how long airlock mcp opens the session again after airlockd stops or restarts (0: give up at once)")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *dir == "" {
		return a.failUsage(o, usageErrorf("--dir is required"))
	}
	if *reopenFor < 0 {
		return a.failUsage(o, usageErrorf("--reopen-for must not be negative"))
	}
	if *ops != "" {
		if err := checkDirOps(parseOps(*ops)); err != nil {
			return a.failUsage(o, err)
		}
	}
	if _, err := parseCaps(*caps); err != nil {
		return a.failUsage(o, err)
	}
	if *pol != "" {
		if err := checkPolicyName(*pol); err != nil {
			return a.failUsage(o, err)
		}
	}
	d, err := canonicalDir(*dir)
	if err != nil {
		return a.failUsage(o, err)
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return o.fail(fmt.Errorf("cannot find the airlock executable: %w", err))
	}
	sock, err := filepath.Abs(a.socket)
	if err != nil {
		return a.failUsage(o, usageErrorf("--socket: %v", err))
	}
	n := *name
	if n == "" {
		n = defaultServerName(d)
	}
	// A letter first: the clients' parsers read a name that looks like a number (0x10, 1e3)
	// as one, and one that starts with '-' as an option.
	if !serverName.MatchString(n) {
		return a.failUsage(o, usageErrorf("--name must be a letter and up to 63 more letters, digits, '_' or '-'"))
	}
	// --ops and --caps are one word each, --flag=value: Gemini CLI's parser reads a lone
	// number-like argument as a number, even after its "--", and stores it so ("--caps 0x10"
	// became "--caps 16", "1.50" "1.5"); a capability id may look like one. DIR and the socket
	// are absolute paths, which never do.
	argv := []string{"--socket", sock, "mcp", "--dir", d}
	if *ops != "" {
		argv = append(argv, "--ops="+strings.Join(parseOps(*ops), ","))
	}
	if *caps != "" {
		argv = append(argv, "--caps="+*caps)
	}
	// A policy FILE is made absolute, as airlock mcp makes it (policyRef), but here, against
	// this working directory rather than the client's. A NAME and an absolute path never look
	// like a number; a duration may ("0"), so --reopen-for is one word too.
	if *pol != "" {
		p := *pol
		if strings.Contains(p, "/") {
			if p, err = filepath.Abs(p); err != nil {
				return a.failUsage(o, usageErrorf("--policy: %v", err))
			}
		}
		argv = append(argv, "--policy", p)
	}
	if isSet(fs, "reopen-for") {
		argv = append(argv, "--reopen-for="+reopenFor.String())
	}
	// line is one shell line: prefix, the executable, then sep (unquoted words) and argv.
	line := func(prefix string, sep ...string) string {
		words := append([]string{prefix, shellQuote(exe)}, sep...)
		for _, w := range argv {
			words = append(words, shellQuote(w))
		}
		return strings.Join(words, " ") + "\n"
	}
	var text string
	switch *which {
	case configJSON:
		type server struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		}
		b, _ := json.MarshalIndent(map[string]any{"mcpServers": map[string]server{n: {Command: exe, Args: argv}}}, "", "  ")
		text = string(b) + "\n"
	case configClaude:
		text = line("claude mcp add " + n + " --")
	case configCodex:
		text = line("codex mcp add " + n + " --")
	case configGemini:
		// Gemini CLI 0.61 (TestGeminiCLIMCPList) reads its own options anywhere on the line
		// before a "--", so argv goes after one, its documented form for a server's flags.
		// Its default scope, project, writes .gemini/settings.json in the working directory,
		// and writes nothing (while saying "added") when that is the home directory:
		// --scope user puts the server in ~/.gemini/settings.json, wherever the line is
		// pasted.
		text = line("gemini mcp add --scope user "+n, "--")
	default:
		return a.failUsage(o, usageErrorf("--client must be %s, %s, %s or %s", configJSON, configClaude, configCodex, configGemini))
	}
	_, _ = io.WriteString(a.stdout, text)
	return exitOK
}

// How airlock mcp --dir opens its session again after the daemon ended the connection that
// held it (dirKeeper).
const (
	// defaultReopenFor is how long it tries by default: a restart, an upgrade or a service
	// manager bringing airlockd back takes seconds; a daemon that is not back in two minutes
	// is not coming back by itself, and the client had better see the server go.
	defaultReopenFor = 2 * time.Minute
	// The first wait after a failed attempt, doubled after each up to reopenBackoffMax: a
	// restarted daemon is found within about a tenth of a second of its start, or two seconds
	// at most after a longer gap, and an absent one costs a dial every two seconds.
	reopenBackoffMin = 100 * time.Millisecond
	reopenBackoffMax = 2 * time.Second
)

// dirKeeper keeps airlock mcp --dir's session open while the server serves. The session lives
// as long as the owner connection that opened it, so a daemon that stops or restarts ends it
// and revokes its grant (its airlock-fs child goes with it); the MCP client, which does not
// restart a server that exits, keeps its MCP session. So the keeper holds the bridge (calls
// answer daemon_unreachable, the tools stay listed), opens the session again on the daemon
// that comes back, with the same id, DIR, operations and policy, and resumes the bridge. A
// policy FILE is a path in the open, which the new daemon reads: an edit made to it during the
// gap applies from the reopen on.
//
// The same id is free on the new daemon: a daemon that stops closes and deletes the
// connection-scoped sessions of the connections it closes, and one that was killed deletes
// them when it next starts (session.Recover), before it answers. Nothing of the old session
// guards its id or generation against a new open of generation 1 (the store keeps no floor for
// a deleted session; the call floors are room callers'), and nothing of it can be replayed: a
// grant is bound to the daemon's host instance id, new at every start, and the old grants died
// with the old daemon's airlock-fs. Keeping the id keeps the bridge as it is: the same tools,
// the same instructions, no list_changed for the fs tools. (Resume's refresh lists --caps as
// the new daemon has them: an adapter it has not started yet loses its tools until a poll
// finds it ready.)
//
// A restart of the daemon's airlock-fs alone is not the keeper's: the connection that holds the
// session stays open, and the daemon, which knows that the grant went with its child, grants
// the session again from the next one and binds it in place (daemon's managedFS.restore); calls
// answer fs_adapter_unavailable, retryable, in between. The keeper could only guess at it from a
// failed call, which an operator's revoke gives too.
type dirKeeper struct {
	a         *app
	id, root  string
	ops       []string
	pol       json.RawMessage
	reopenFor time.Duration
	log       *slog.Logger
	// cur is the session open now, nil from the loss of one until it is open again. keep owns
	// it while it runs; its caller closes it after keep has returned.
	cur *dirSession
	// beforeAttempt, when not nil, runs before each attempt of a reopen: a test holds the
	// keeper there to see the bridge between a new daemon's start and the reopen
	// (TestHoldUntilReopened).
	beforeAttempt func(ctx context.Context)
}

// keep waits for the connection that holds the session to end and opens the session again,
// for as long as ctx lasts. It returns nil when ctx ends, and otherwise the reason the session
// is lost for good (mcpServe fails the bridge with it, or stops serving): reopenFor is 0, or
// the daemon did not take the session back within reopenFor (exit 69, with the command that
// starts it), or it refused the open in a way that retrying cannot fix (DIR or the policy file
// is gone, …; the daemon's error, exit 1).
func (k *dirKeeper) keep(ctx context.Context, b *mcp.Bridge) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-k.cur.owner.Done():
		}
		k.cur.owner.Close()
		k.cur = nil
		if k.reopenFor <= 0 {
			k.log.Warn("airlockd closed the connection that held the session; its tools are gone", "session", k.id)
			return transportErrorf(exitUnavailable, "airlockd closed the connection that held session %s; the session and its grant are gone; %s",
				k.id, k.a.startHint())
		}
		// Held before the warning: whoever reads the warning finds the calls already
		// answered with why (TestDirReopensAfterRestart calls as soon as it reads it).
		b.Hold(fmt.Sprintf("airlockd stopped or restarted, and airlock mcp is opening session %s again", k.id))
		k.log.Warn("airlockd closed the connection that held the session (it stopped or restarted); opening it again",
			"session", k.id, "for", k.reopenFor)
		ds, err := k.reopen(ctx)
		if ds == nil {
			return err
		}
		k.cur = ds
		rctx, cancel := context.WithTimeout(ctx, callTimeout)
		if err := b.Resume(rctx); err != nil {
			k.log.Debug("tool list refresh after the reopen failed; the poll retries", "err", err)
		}
		cancel()
		// At the warning's level: whoever saw the loss sees the recovery, at the default level too.
		k.log.Warn("session reopened", "session", k.id)
	}
}

// reopen opens the session again: at once, then after waits from reopenBackoffMin doubling up
// to reopenBackoffMax, while the daemon is out of reach or refuses the open retryably (it is
// still recovering, its airlock-fs is not up yet, the owner before has not been closed), until
// reopenFor has passed: the last wait is cut to end then, and one last attempt follows it.
// Each attempt may take callTimeout. It returns (nil, nil) when ctx ends.
func (k *dirKeeper) reopen(ctx context.Context) (*dirSession, error) {
	deadline := time.Now().Add(k.reopenFor)
	wait := reopenBackoffMin
	for {
		if k.beforeAttempt != nil {
			k.beforeAttempt(ctx)
		}
		actx, cancel := context.WithTimeout(ctx, callTimeout)
		ds, err := k.a.openDirSession(actx, k.id, k.root, k.ops, k.pol)
		cancel()
		switch {
		case err == nil:
			return ds, nil
		case ctx.Err() != nil:
			return nil, nil
		case !reopenRetryable(err):
			k.log.Error("airlockd refused to open the session again", "session", k.id, "err", err)
			return nil, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			k.log.Debug("session not reopened", "session", k.id, "err", err)
			return nil, transportErrorf(exitUnavailable, "airlockd did not take session %s back within %v (%v); %s",
				k.id, k.reopenFor, err, k.a.startHint())
		}
		k.log.Debug("session not reopened", "session", k.id, "err", err, "retryIn", min(wait, left))
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		wait = min(2*wait, reopenBackoffMax)
	}
}

// reopenRetryable reports whether a failed open may succeed if tried again: the daemon was out
// of reach or closed the connection (a transport failure), or it refused retryably. Any other
// refusal (cwd gone, policy file gone, an operation the grant cannot have) stays as it is.
func reopenRetryable(err error) bool {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Retryable
	}
	return true
}
