package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/flagargs"
	"github.com/airlockhq/airlock/internal/paths"
)

// callTimeout bounds dialing plus one exchange of the one-shot commands. The daemon answers
// them in milliseconds; 30 s leaves room for a loaded host syncing its catalog without letting
// a wedged daemon hang a script forever.
const callTimeout = 30 * time.Second

// app is one invocation of the CLI.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	socket         string
	streamed       bool // wake printed the model's text as it came
}

// command is one entry of the command table, which drives dispatch and help.
type command struct {
	name     string // the words after "airlock"
	synopsis string // flags and arguments
	summary  string
	run      func(a *app, ctx context.Context, args []string) int
}

func commandTable() []command {
	return []command{
		{"status", "[--json]", "show host status and resident sessions", (*app).status},
		{"probe", "[--timeout 5s] [--json]", "check readiness: exit 0 ready, 75 not ready, 69 unreachable, 76 protocol failure", (*app).probe},
		{"session open", "SESSION --generation N --cwd DIR [--name S] [--mode new|open|continue|memory]\n" +
			"      [--path P] [--session-dir D] [--agent-dir D] [--model PROVIDER/ID] [--thinking-level L]\n" +
			"      [--system-prompt-file F] [--descriptor FILE|- | --fs-ops OP,OP…] [--room R] [--policy NAME|FILE]\n" +
			"      [--protocol 2.0|1.0] [--json]", "open (or reuse) a session generation; --descriptor grants a host tool adapter, --fs-ops the cwd from airlockd's own airlock-fs, --room the room's published capabilities", (*app).sessionOpen},
		{"session close", "SESSION --generation N [--delete] [--json]", "close a session generation; --delete also removes its durable records", (*app).sessionClose},
		{"session list", "[--limit N] [--json]", "list the durable session catalog", (*app).sessionList},
		{"session show", "SESSION [--json]", "show a session's catalog record and runtime snapshot", (*app).sessionShow},
		{"session attach", "SESSION --generation N", "print the session's events as NDJSON until interrupted", (*app).sessionAttach},
		{"wake", "SESSION PROMPT|- --generation N [--key K] [--source S] [--no-wait] [--timeout 30m] [--json]", "run an agent turn; streams the model's text, or returns the ticket with --no-wait", (*app).wake},
		{"steer", "SESSION MESSAGE|- --generation N [--key K] [--json]", "add a message the running turn's model sees before its next call", (*app).steer},
		{"follow-up", "SESSION MESSAGE|- --generation N [--key K] [--json]", "add a message the running turn continues with once the model is done", (*app).followUp},
		{"abort", "SESSION --generation N [--json]", "cancel the session's running turn", (*app).abort},
		{"ticket", "TICKET [--json]", "show the durable state of a wake", (*app).ticket},
		{"reconcile", "TICKET --outcome succeeded|failed [--json]", "settle a wake a restart left indeterminate", (*app).reconcile},
		{"tool", "SESSION OPERATION --generation N [--call-id ID] [--arg key=value …] [--json]", "call a granted host tool operation (fs.read, fs.list, …); without --arg, JSON arguments come from stdin", (*app).tool},
		{"adapter register", "NAME [--pass-env VAR]… [--room R | --session S --generation N] [--lease 2h] [--json] -- COMMAND [ARGS…]", "approve, start and validate a capability adapter (recording the SHA-256 of its executable and script), then persist it; --pass-env passes a variable from the daemon's environment; --room/--session/--lease make it temporary", (*app).adapterRegister},
		{"adapter approve", "NAME [--json]", "accept an adapter's changed executable or script: show old and new SHA-256, re-record them and start it", (*app).adapterApprove},
		{"adapter remove", "NAME [--json]", "stop an adapter and forget its registration", (*app).adapterRemove},
		{"adapter list", "[--json]", "show every adapter's state (changed: its files differ from the approved digests), pid, restarts, last failure, tie, lease and digest prefixes", (*app).adapterList},
		{"adapter proposals", "[--session S --generation N] [--json]", "list agents' adapter proposals: state (pending_run … published, refused, failed, ended), the error that ended one, its publication, and what runs; their approvals wait in airlock approvals", (*app).adapterProposals},
		{"adapter logs", "NAME [--json]", "print an adapter's kept stderr lines (operator only)", (*app).adapterLogs},
		{"cap list", "[--json]", "list the capabilities the adapters project", (*app).capList},
		{"cap describe", "--id ID [--json]", "print a capability's descriptor", (*app).capDescribe},
		{"cap observe", "--id ID [--json]", "observe a capability", (*app).capObserve},
		{"cap invoke", "--id ID --action A [--args JSON] [--json]", "invoke an action; args are checked against its declared input", (*app).capInvoke},
		{"room status", "[--json]", "show this host's room identity and the bus it is on", (*app).roomStatus},
		{"room bus-hosts", "[--json]", "list the other daemons admitted to this host's embedded room bus (airlockd --nats-via), with the rooms each may use", (*app).roomBusHosts},
		{"room bus-remove", "HOST [--json]", "remove an admitted daemon from this host's embedded room bus: its connection closes and it cannot come back until admitted again", (*app).roomBusRemove},
		{"room create", "ROOM [--title T] [--json]", "create a room owned by this host", (*app).roomCreate},
		{"room list", "[--json]", "list the rooms this host is in", (*app).roomList},
		{"room show", "ROOM [--json]", "show a room's members and the capabilities visible in it", (*app).roomShow},
		{"room close", "ROOM [--json]", "close a room this host owns (every other member loses it), or leave another's", (*app).roomClose},
		{"room invite", "ROOM [--name N] [--json]", "print a one-time, short-lived join code for one other host", (*app).roomInvite},
		{"room remove", "ROOM HOST [--json]", "take a member (its host id, as room show prints it) out of a room this host owns: its calls are refused from then on and it forgets the room; a new join code can invite it again", (*app).roomRemove},
		{"room join", "CODE|- [--json]", "join the room of a join code (- reads it from stdin)", (*app).roomJoin},
		{"room publish", "--room R --cap X [--actions a,b] [--observe] [--members H,H] [--approve-each] [--json]", "publish a local capability into a room", (*app).roomPublish},
		{"room unpublish", "--room R --cap X [--json]", "withdraw a capability from a room", (*app).roomUnpublish},
		{"room caps", "--room R [--json]", "list the capabilities this host sees in a room", (*app).roomCaps},
		{"room observe", "--room R --cap X [--provider H] [--json]", "observe a capability another host published", (*app).roomObserve},
		{"room invoke", "--room R --cap X --action A [--args JSON] [--provider H] [--json]", "invoke a published action; the provider authorizes it", (*app).roomInvoke},
		{"room approvals", "[--json]", "an alias of approvals", (*app).roomApprovals},
		{"room approve", "ID [--remember [--pattern GLOB | --any-args]] [--json]", "an alias of approve", (*app).roomApprove},
		{"room deny", "ID [--json]", "an alias of deny", (*app).roomDeny},
		{"room open-ui", "[--json]", "print a one-time login URL for this host's web page (airlockd --http)", (*app).roomOpenUI},
		{"approvals remembered", "[--json]", "list the remembered approvals: scope (session generation or room membership), target, what they match, uses", (*app).approvalsRemembered},
		{"approvals forget", "MEMORY [--json]", "revoke a remembered approval: the next such call waits again", (*app).approvalsForget},
		{"approvals", "[--json]", "list every request waiting for this host's operator (a call a policy asks about, a room call to an approve-each publication, an agent's proposal): who, what, full arguments (bounded), why", (*app).approvals},
		{"approve", "ID [--remember [--pattern GLOB | --any-args]] [--json]", "let a waiting request run; --remember lets the same call run again without asking for the rest of the caller's session generation (or room membership)", (*app).approve},
		{"deny", "ID [--json]", "refuse a waiting request (its caller gets approval_denied)", (*app).deny},
		{"policy check", "FILE [--json]", "validate a policy file as airlockd reads it (strict: unknown keys, bad globs refused with the field) and run its examples; exit 1 on any failure", (*app).policyCheck},
		{"validate capability", "[--action A --args JSON] [--timeout 1.5s] [--pass-env VAR]… [--json] -- CMD [ARGS…]", "run the conformance probes against a capability adapter, then the runtime's fault probes; exit 1 on any FAIL", (*app).validateCapability},
		{"validate tool-adapter", "--socket PATH --descriptor FILE|- --scratch DIR [--json]", "run the conformance probes against a listening host tool adapter; exit 1 on any FAIL", (*app).validateToolAdapter},
		{"mcp config", "--dir DIR [--client json|claude|codex|gemini] [--name N] [--ops OP,OP…] [--caps ID,ID…]\n" +
			"      [--policy NAME|FILE] [--reopen-for 2m]",
			"print a client configuration that runs airlock mcp --dir DIR, with absolute paths and this socket; an operation or policy name airlock mcp would refuse is refused now", (*app).mcpConfig},
		{"mcp", "(--dir DIR [--ops OP,OP…] [--policy NAME|FILE] [--reopen-for 2m] | --session S --generation N) [--caps ID,ID…]\n" +
			"      [--http 127.0.0.1:PORT [--listen]] [--poll 2s] [--log-level warn]",
			"serve a directory (--dir: a session of its own, closed with its grant when the client goes, opened again when airlockd restarts) or a session's granted tools, and the named capabilities, as an MCP server (stdio, or Streamable HTTP with a bearer token)", (*app).mcpServe},
		{"fabric init", "--dir DIR --node NAME=IP … --host NAME=HOSTID … [--room ROOM=OWNER[,MEMBER…]] [--cluster NAME]\n" +
			"      [--client-port 4222] [--route-port 6222] [--json]", "write a cluster's fabric: a private CA, per-node certificates, nkey users and a fabric file per node (no daemon needed)", (*app).fabricInit},
		{"fabric status", "[--json]", "show the room bus node of this host: with airlockd --fabric its routes and RTT, leaves and JetStream health; else the local node", (*app).fabricStatus},
		{"audit verify", "[--dir DIR] [--head SEQ:DIGEST] [--json]", "check every link of the audit journal; exit 1 (audit_chain_broken) naming the first broken one, or when the exported head is not in it", (*app).auditVerify},
		{"audit head", "[--dir DIR] [--json]", "print the audit journal's newest record as SEQ:DIGEST, to keep elsewhere and pass to audit verify --head later", (*app).auditHead},
		{"audit", "[--dir DIR] [--since 2h|TIME|DATE] [--session S] [--room R] [--door D] [--follow] [--marks] [--json]", "print the audit journal's effects and decisions, oldest first (--json: NDJSON, each line as the journal holds it); reads the files, no daemon needed", (*app).auditRead},
		{"drain", "[--timeout-ms N] [--json]", "stop admitting new sessions and tell attached clients", (*app).drain},
		{"raw", "[--wait 10s]", "send NDJSON envelopes from stdin, print every line the daemon sends", (*app).raw},
		{"help", "", "print this help", (*app).help},
	}
}

// run is the whole CLI: it parses args, runs one command and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	top := &output{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("airlock", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&a.socket, "socket", paths.Socket(), "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.usage(stdout)
			return exitOK
		}
		return a.failUsage(top, err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return a.failUsage(top, usageErrorf("no command given"))
	}
	for _, c := range commandTable() {
		words := strings.Fields(c.name)
		if len(rest) >= len(words) && strings.Join(rest[:len(words)], " ") == c.name {
			return c.run(a, ctx, rest[len(words):])
		}
	}
	if subs := groupCommands(rest[0]); len(subs) > 0 {
		switch {
		case len(rest) == 1:
			list := subs[len(subs)-1]
			if len(subs) > 1 {
				list = strings.Join(subs[:len(subs)-1], ", ") + " or " + list
			}
			return a.failUsage(top, usageErrorf("%s needs a subcommand: %s", rest[0], list))
		case rest[1] == "-h" || rest[1] == "--help" || rest[1] == "help":
			a.groupUsage(a.stdout, rest[0])
			return exitOK
		}
		return a.failUsage(top, usageErrorf("unknown command %q", rest[0]+" "+rest[1]))
	}
	return a.failUsage(top, usageErrorf("unknown command %q", rest[0]))
}

// groupCommands returns the subcommands of group, a word that only commands of two words
// start with (session, room, adapter, cap, …), in the order of the help.
func groupCommands(group string) []string {
	var subs []string
	for _, c := range commandTable() {
		first, sub, ok := strings.Cut(c.name, " ")
		if first != group {
			continue
		}
		if !ok {
			return nil // a command of its own, which parsed its arguments itself
		}
		subs = append(subs, sub)
	}
	return subs
}

// groupUsage prints the help of the commands of one group, as the CLI's help does.
func (a *app) groupUsage(w io.Writer, group string) {
	fmt.Fprintf(w, "usage: airlock %s SUBCOMMAND [flags]\n\nCommands:\n", group)
	for _, c := range commandTable() {
		if first, _, _ := strings.Cut(c.name, " "); first == group {
			fmt.Fprintf(w, "  %s\n      %s\n", strings.TrimSpace(c.name+" "+c.synopsis), c.summary)
		}
	}
}

// failUsage reports a usage error and points at the help of the command, or of the CLI.
func (a *app) failUsage(o *output, err error) int {
	var ce *cliError
	if !errors.As(err, &ce) {
		err = usageErrorf("%v", err)
	}
	code := o.fail(err)
	hint := "airlock help"
	if o.command != "" {
		hint = "airlock " + o.command + " -h"
	}
	fmt.Fprintf(a.stderr, "run '%s' for usage\n", hint)
	return code
}

func (a *app) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: airlock [--socket PATH] COMMAND [flags]\n\n")
	fmt.Fprintf(w, "The socket defaults to $AIRLOCK_SOCKET, $XDG_RUNTIME_DIR/airlock/airlockd.sock,\n")
	fmt.Fprintf(w, "/run/user/$UID/airlock/airlockd.sock or /tmp/airlock-$UID/airlockd.sock (here: %s).\n\nCommands:\n", a.socket)
	for _, c := range commandTable() {
		fmt.Fprintf(w, "  %s\n      %s\n", strings.TrimSpace(c.name+" "+c.synopsis), c.summary)
	}
	fmt.Fprintf(w, "\nWith --json a command prints one object {schema, command, ok, data|error}.\n")
	fmt.Fprintf(w, "Errors go to stderr as 'airlock: CODE: message'. Exit codes: 0 ok, 1 refused by the\n")
	fmt.Fprintf(w, "daemon, 2 usage, 69 daemon unreachable, 75 not ready (probe), 76 protocol failure,\n")
	fmt.Fprintf(w, "130 interrupted (SIGINT or SIGTERM) before the command ended.\n")
}

func (a *app) help(context.Context, []string) int {
	a.usage(a.stdout)
	return exitOK
}

// newCommand returns the output and the flag set of one command. Every command also accepts
// --socket, so that it may follow the command name too.
func (a *app) newCommand(name string) (*output, *flag.FlagSet) {
	o := &output{stdout: a.stdout, stderr: a.stderr, command: name}
	fs := flag.NewFlagSet("airlock "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&a.socket, "socket", a.socket, "daemon socket `path`")
	return o, fs
}

// parse parses a command's flags and positional arguments, which may come in any order (flag
// alone stops at the first positional one). It wants exactly the named positional arguments.
// When it returns done, the command ends with code: after -h, or a usage error.
func (a *app) parse(o *output, fs *flag.FlagSet, args []string, positional ...string) (pos []string, code int, done bool) {
	pos, err := flagargs.Parse(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.commandHelp(o.command, fs)
			return nil, exitOK, true
		}
		return nil, a.failUsage(o, err), true
	}
	if len(pos) != len(positional) {
		if len(pos) < len(positional) {
			return nil, a.failUsage(o, fmt.Errorf("missing %s", positional[len(pos)])), true
		}
		return nil, a.failUsage(o, fmt.Errorf("unexpected argument %q", pos[len(positional)])), true
	}
	for i, p := range pos {
		if p == "" {
			return nil, a.failUsage(o, fmt.Errorf("%s must not be empty", positional[i])), true
		}
	}
	return pos, exitOK, false
}

func (a *app) commandHelp(name string, fs *flag.FlagSet) {
	for _, c := range commandTable() {
		if c.name == name {
			fmt.Fprintf(a.stdout, "usage: airlock %s\n\n%s\n\nFlags:\n", strings.TrimSpace(c.name+" "+c.synopsis), c.summary)
		}
	}
	fs.SetOutput(a.stdout)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// dial connects to the daemon; a failure is reported as unreachable (exit 69).
func (a *app) dial(ctx context.Context, version string) (*client.Client, error) {
	c, err := client.Dial(ctx, a.socket)
	if err != nil {
		return nil, unreachable(a.socket, err)
	}
	if version != "" {
		c.SetVersion(version)
	}
	return c, nil
}

// unreachable describes a failed dial. When no daemon listens on the socket (no socket file,
// or a stale one nothing accepts on) it also says how to start one there.
func unreachable(socket string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	var cause error = err
	// "dial unix PATH: connect: ENOENT" names the path twice once it is in the message.
	if u := errors.Unwrap(err); u != nil {
		cause = u
	}
	ce := transportErrorf(exitUnavailable, "cannot connect to airlockd at %s: %v", socket, cause)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		ce.hint = "is airlockd running? " + startDaemonHint(socket)
	}
	return ce
}

// startDaemonHint is the sentence that tells a person how to start the daemon a command looked
// for: airlockd beside this airlock (as make build and a release lay them out), on the socket
// it looked at.
func startDaemonHint(socket string) string {
	daemon := "airlockd"
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			if p := filepath.Join(filepath.Dir(exe), "airlockd"); isExecutable(p) {
				daemon = p
			}
		}
	}
	return fmt.Sprintf("start it with `%s --socket %s &` (or `systemctl --user start airlockd`)",
		shellQuote(daemon), shellQuote(socket))
}

// call runs one command on a fresh connection and returns the data of its answer. A refusal
// comes back as the daemon's *protocol.Error.
func (a *app) call(ctx context.Context, version string, cmd client.Command) (json.RawMessage, error) {
	return a.callWithin(ctx, callTimeout, version, cmd)
}

// callWithin is call with another bound than callTimeout.
func (a *app) callWithin(ctx context.Context, timeout time.Duration, version string, cmd client.Command) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := a.dial(ctx, version)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return exchange(ctx, c, cmd)
}

// exchange sends one command on c and returns the data of its answer.
func exchange(ctx context.Context, c *client.Client, cmd client.Command) (json.RawMessage, error) {
	resp, err := c.Call(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if err := resp.Err(); err != nil {
		return nil, err
	}
	return resp.Data, nil
}
