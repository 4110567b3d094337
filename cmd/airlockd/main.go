// Command airlockd is the airlock host daemon: it serves the owner socket, keeps sessions and
// their durable catalog, and stops cleanly on SIGTERM (drain) or SIGINT (faster).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/approval"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/ownersock"
	"github.com/airlockhq/airlock/internal/paths"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/roomhost"
	"github.com/airlockhq/airlock/internal/session"
	"github.com/airlockhq/airlock/internal/turn"
	"github.com/airlockhq/airlock/internal/version"
)

// Shutdown deadlines: SIGTERM is the orderly stop of a service manager and gets time to answer
// what is in flight; SIGINT is a person at a terminal who wants the prompt back.
const (
	termShutdown = 30 * time.Second
	intShutdown  = 5 * time.Second
)

func main() {
	err := run(os.Args[1:], os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "airlockd:", err)
		if h := hint(err); h != "" {
			fmt.Fprintln(os.Stderr, "airlockd:", h)
		}
	}
	os.Exit(exitCode(err))
}

// hint is what to do about a failed start that a person commonly meets, "" for the rest: a
// second daemon on the socket of a running one (the default socket, when one runs already).
func hint(err error) string {
	if errors.Is(err, ownersock.ErrActive) {
		return "another airlockd serves this socket (airlock status shows it): stop it first, or give this one its own --socket and --state-dir"
	}
	return ""
}

// exitCode is airlockd's exit status after run: 0 after a clean stop or --help (which asked
// for the usage, as airlock help and airlock-fs --help do), 2 when it could not start or
// stopped on an error.
func exitCode(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("airlockd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	limits := daemon.DefaultLimits
	var (
		socket      = fs.String("socket", "", "owner socket path (default $AIRLOCK_SOCKET, $XDG_RUNTIME_DIR/airlock/airlockd.sock, /run/user/$UID/airlock/airlockd.sock or /tmp/airlock-$UID/airlockd.sock)")
		stateDir    = fs.String("state-dir", "", "state directory (default $AIRLOCK_STATE_DIR, $XDG_STATE_HOME/airlock or ~/.local/state/airlock)")
		logFormat   = fs.String("log-format", "text", "log format: text or json")
		logLevel    = fs.String("log-level", "info", "log level: debug, info, warn or error")
		maxSessions = fs.Int("max-sessions", 128, "maximum resident sessions")
		showVersion = fs.Bool("version", false, "print the version and exit")
	)
	fs.IntVar(&limits.MaxConnections, "max-connections", limits.MaxConnections, "maximum concurrent client connections")
	fs.IntVar(&limits.MaxConnectionsPerPeer, "max-connections-per-peer", limits.MaxConnectionsPerPeer, "maximum connections of one client process (capped at --max-connections); past it the process's idle connections make room")
	fs.IntVar(&limits.MaxAttachments, "max-attachments", limits.MaxAttachments, "maximum session attachments of all connections, below --max-connections (0: half of --max-connections); at it, an attachment of the process holding the most makes room")
	fs.IntVar(&limits.MaxAttachmentsPerSession, "max-attachments-per-session", limits.MaxAttachmentsPerSession, "maximum attachments of one session; at it, an attachment of the process holding the most there makes room")
	fs.IntVar(&limits.ControlConnections, "control-connections", limits.ControlConnections, "connections beyond --max-connections reserved for handshake, status, drain, close and abort while every other is busy (0: none)")
	fs.IntVar(&limits.ControlConnectionsPerPeer, "control-connections-per-peer", limits.ControlConnectionsPerPeer, "control connections of one client process (capped at --control-connections)")
	fs.DurationVar(&limits.FirstLineTimeout, "first-line-timeout", limits.FirstLineTimeout, "deadline for a connection's first complete command line, from accept")
	fs.DurationVar(&limits.LineTimeout, "line-timeout", limits.LineTimeout, "deadline for a command line, from its first byte to its LF")
	fs.IntVar(&limits.MaxInFlight, "max-in-flight-requests-per-connection", limits.MaxInFlight, "maximum commands in flight on one connection")
	fs.IntVar(&limits.MaxLineBytes, "max-line-bytes", limits.MaxLineBytes, "maximum inbound line, without LF")
	fs.IntVar(&limits.MaxEventBytes, "max-event-bytes", limits.MaxEventBytes, "maximum outbound event, LF included")
	fs.IntVar(&limits.MaxResponseBytes, "max-response-bytes", limits.MaxResponseBytes, "maximum outbound response, LF included")
	fs.IntVar(&limits.MaxOutboundBytes, "max-outbound-bytes-per-connection", limits.MaxOutboundBytes, "maximum bytes queued for one connection")
	var turns daemon.TurnLimits
	fs.IntVar(&turns.MaxConcurrentTurns, "max-concurrent-turns", session.DefaultMaxConcurrentTurns, "maximum agent turns running at once on the host")
	fs.IntVar(&turns.QueueDepth, "max-session-queue-depth", session.DefaultQueueDepth, "maximum wakes queued per session")
	fs.IntVar(&turns.MaxToolOutputBytes, "max-tool-output-bytes", turn.DefaultMaxToolOutputBytes, "maximum bytes of one tool call's output shown to the model")
	fs.DurationVar(&turns.RecoveryOpenTimeout, "recovery-open-timeout", session.DefaultRecoveryOpenTimeout, "deadline for restoring one session at startup")
	fs.DurationVar(&turns.RecoveryTimeout, "recovery-timeout", session.DefaultRecoveryTimeout, "deadline for the whole startup recovery")
	var rooms daemon.RoomsConfig
	roomsOn := fs.Bool("rooms", true, "run the room service: an embedded NATS server on loopback, or the one of the daemon --nats-via names")
	fs.StringVar(&rooms.NATSVia, "nats-via", "", "join the room bus of another airlockd of this user instead of embedding one: its owner `SOCKET`, through which this host is admitted (airlock room bus-hosts lists the hosts admitted)")
	fs.Func("nats-url", "removed: the embedded room bus admits authenticated hosts only; use --nats-via SOCKET", func(string) error {
		return errors.New("--nats-url is gone: the embedded room bus admits only the hosts it knows; pass the first daemon's owner socket with --nats-via SOCKET")
	})
	fs.StringVar(&rooms.Listen, "nats-listen", "", "the embedded room bus's listen `address` (loopback only; default 127.0.0.1 on a random port)")
	fabricFile := fs.String("fabric", "", "make the embedded room bus a node of a room fabric: its fabric `FILE` (written by airlock fabric init; docs/fabric.md)")
	fs.DurationVar(&rooms.ApprovalWait, "room-approval-wait", room.ApprovalTimeout, "how long this host's calls wait for a provider's per-call approval (at most 60s)")
	fs.DurationVar(&rooms.InviteTTL, "room-invite-ttl", roomhost.DefaultInviteTTL, "how long a room join code stays valid")
	var adapters capclient.Options
	fs.DurationVar(&adapters.StartTimeout, "adapter-start-timeout", capclient.DefaultStartTimeout, "deadline for a capability adapter to start and describe its capabilities")
	fs.DurationVar(&adapters.CallTimeout, "adapter-call-timeout", capclient.DefaultCallTimeout, "deadline of one observe or invoke of a capability adapter")
	httpAddr := fs.String("http", "", "serve the operator's web page on `127.0.0.1:PORT` (off by default; loopback only unless --http-allow-non-loopback); airlock room open-ui prints a login URL")
	httpAnyAddr := fs.Bool("http-allow-non-loopback", false, "let --http listen on a non-loopback address (the page still answers only requests naming that address)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at http://`127.0.0.1:PORT`/metrics (off by default; loopback only unless --metrics-allow-non-loopback)")
	metricsAnyAddr := fs.Bool("metrics-allow-non-loopback", false, "let --metrics listen on a non-loopback address")
	fsAdapter := fs.String("fs-adapter", "", "the airlock-fs `executable` airlockd runs, on first use, for opens that ask it for a grant (airlock mcp --dir, session open --fs-ops) (default: airlock-fs beside airlockd)")
	policyFile := fs.String("policy", "", "the host's policy `FILE` (docs/operations.md, \"Approvals and policy\"): allow, ask or deny for every fs operation and capability action at every door, beside each session's own; its examples must pass (airlock policy check FILE)")
	approvalTimeout := fs.Duration("approval-timeout", approval.DefaultTimeout, "how long a request waits in the approval queue for the operator (airlock approvals) before it is refused approval_timeout (at most 10m); a room caller's own wait bounds its calls too")
	noFSAdapter := fs.Bool("no-fs-adapter", false, "run no airlock-fs: only descriptors of an airlock-fs you run yourself grant tools")
	auditOn := fs.Bool("audit", true, "keep the audit journal of every effect and decision in <state-dir>/audit (docs/operations.md, \"The audit journal\"); --audit=false keeps none")
	auditArgs := fs.Bool("audit-args", false, "also keep each call's arguments in the audit journal (canonical JSON, up to 4 KiB; longer ones keep only their SHA-256, which is always kept)")
	auditSync := audit.SyncInterval
	fs.TextVar(&auditSync, "audit-sync", audit.SyncInterval, "when the audit journal reaches the disk: `interval` (each record written before the call goes on or its answer leaves, fdatasynced within 100ms: a crash of airlockd loses nothing, a power loss or kernel crash at most the last 100ms) or answer (every call's records also fdatasynced before its answer leaves, shared by the calls that end together: a power loss loses no answered call, at the cost of a disk sync per call)")
	auditHeadFile := fs.String("audit-head-file", "", "also write the audit chain's head to this `FILE` (atomically) at start and whenever it is exported: every 5 minutes while it moves, and at shutdown; one that cannot be written refuses the start; point it somewhere collected off this user's reach")
	var providers providerFlags
	fs.Func("provider", "a model provider, `NAME=BASE_URL` (an OpenAI-compatible base URL ending in /v1); repeatable", providers.add)
	fs.Func("provider-key-env", "the environment variable holding a provider's API key, `NAME=ENV_VAR`; repeatable", providers.addKeyEnv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	configured, err := providers.resolve(os.Getenv)
	if err != nil {
		return err
	}
	for name, p := range configured {
		if p.KeyEnv != "" && p.Key == "" {
			// Not fatal: sessions that need the key are quarantined credentials_required until
			// the daemon is restarted with it.
			fmt.Fprintf(stderr, "airlockd: warning: provider %s: environment variable %s is unset or empty; its sessions cannot run turns\n", name, p.KeyEnv)
		}
	}
	if rooms.NATSVia != "" && rooms.Listen != "" {
		return errors.New("--nats-listen configures the embedded room bus, which --nats-via replaces")
	}
	if !*roomsOn && (rooms.NATSVia != "" || rooms.Listen != "" || *fabricFile != "") {
		return errors.New("--nats-via, --nats-listen and --fabric need the room service (--rooms)")
	}
	if *fabricFile != "" && (rooms.NATSVia != "" || rooms.Listen != "") {
		return errors.New("--fabric configures the embedded room bus from its file, without --nats-via or --nats-listen")
	}
	if rooms.ApprovalWait <= 0 || rooms.ApprovalWait > room.ApprovalTimeout {
		return fmt.Errorf("--room-approval-wait must be in (0, %s]", room.ApprovalTimeout)
	}
	if *approvalTimeout <= 0 || *approvalTimeout > approval.MaxTimeout {
		return fmt.Errorf("--approval-timeout must be in (0, %s]", approval.MaxTimeout)
	}
	if rooms.InviteTTL <= 0 {
		return errors.New("--room-invite-ttl must be positive")
	}
	if *httpAddr != "" && !*roomsOn {
		return errors.New("--http serves the room service's page and needs it (--rooms)")
	}
	if *httpAnyAddr && *httpAddr == "" {
		return errors.New("--http-allow-non-loopback needs --http")
	}
	if *metricsAnyAddr && *metricsAddr == "" {
		return errors.New("--metrics-allow-non-loopback needs --metrics")
	}
	if !*auditOn && (*auditArgs || *auditHeadFile != "" || flagSet(fs, "audit-sync")) {
		return errors.New("--audit-args, --audit-head-file and --audit-sync need the audit journal (--audit)")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *showVersion {
		fmt.Println("airlockd", version.Version)
		return nil
	}
	log, err := newLogger(*logFormat, *logLevel, stderr)
	if err != nil {
		return err
	}
	if *fabricFile != "" {
		if rooms.Fabric, err = bus.LoadFabric(*fabricFile); err != nil {
			return fmt.Errorf("--fabric: %w", err)
		}
		if rooms.Fabric.ExpiresSoon(time.Now()) {
			cert, ca := rooms.Fabric.Expiry()
			log.Warn("the fabric's certificates expire soon: past that, this node's peers refuse its routes; write the fabric again (airlock fabric init)",
				"certificate", cert.UTC().Format(time.RFC3339), "ca", ca.UTC().Format(time.RFC3339))
		}
	}
	if *socket == "" {
		*socket = paths.Socket()
	}
	if *stateDir == "" {
		if *stateDir, err = paths.StateDir(); err != nil {
			return err
		}
	}

	var hostPolicy *policy.Policy
	if *policyFile != "" {
		if hostPolicy, err = policy.ReadFile(*policyFile); err != nil {
			return fmt.Errorf("--policy: %w", err)
		}
		if f := hostPolicy.Check(); len(f) > 0 {
			return fmt.Errorf("--policy: example %d expects %s and gets %s (airlock policy check %s)", f[0].Index+1, f[0].Example.Expect, f[0].Got.Decision, *policyFile)
		}
	}

	d, err := daemon.Start(daemon.Config{
		Policy:          hostPolicy,
		ApprovalTimeout: *approvalTimeout,
		SocketPath:      *socket,
		StateDir:        *stateDir,
		Limits:          limits,
		MaxSessions:     *maxSessions,
		Logger:          log,
		Version:         version.Version,
		Providers:       configured,
		Turns:           turns,
		Adapters:        adapters,
		Rooms:           roomsConfig(*roomsOn, rooms),
		Web:             webConfig(*httpAddr, *httpAnyAddr),
		Metrics:         metricsConfig(*metricsAddr, *metricsAnyAddr),
		ManagedFS:       managedFS(*fsAdapter, *noFSAdapter, log),
		Audit:           auditConfig(*auditOn, *auditArgs, *auditHeadFile, auditSync),
	})
	if err != nil {
		return err
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	sig := <-sigs
	deadline := termShutdown
	if sig == syscall.SIGINT {
		deadline = intShutdown
	}
	log.Info("signal received", "signal", sig.String(), "deadline", deadline)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	go func() {
		// A second signal means "now": drop whatever is still being answered.
		select {
		case <-sigs:
			cancel()
		case <-d.Done():
		}
	}()
	return d.Shutdown(ctx)
}

// managedFS configures the airlock-fs airlockd runs: the --fs-adapter executable, else
// airlock-fs in airlockd's own directory (as make build and a release archive lay them out);
// none with --no-fs-adapter or when there is none to run, which the refusal of a managed open
// then names.
func managedFS(path string, off bool, log *slog.Logger) *daemon.ManagedFSConfig {
	if off {
		return &daemon.ManagedFSConfig{Disabled: "disabled by --no-fs-adapter"}
	}
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return &daemon.ManagedFSConfig{Disabled: "airlockd cannot find its own executable to look beside it"}
		}
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			path = filepath.Join(filepath.Dir(exe), "airlock-fs")
		}
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		var fi os.FileInfo
		if fi, err = os.Stat(abs); err == nil && (!fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0) {
			err = errors.New("not an executable file")
		}
	}
	if err != nil {
		log.Info("no airlock-fs to run: opens asking airlockd for a grant are refused", "path", path, "err", err)
		return &daemon.ManagedFSConfig{Disabled: fmt.Sprintf("no executable airlock-fs at %s; pass --fs-adapter", path)}
	}
	return &daemon.ManagedFSConfig{Binary: abs}
}

func webConfig(addr string, anyAddr bool) *daemon.WebConfig {
	if addr == "" {
		return nil
	}
	return &daemon.WebConfig{Addr: addr, AllowNonLoopback: anyAddr}
}

func auditConfig(on, args bool, headFile string, sync audit.SyncMode) *daemon.AuditConfig {
	if !on {
		return nil
	}
	return &daemon.AuditConfig{RecordArgs: args, HeadFile: headFile, Journal: audit.Options{Sync: sync}}
}

func metricsConfig(addr string, anyAddr bool) *daemon.MetricsConfig {
	if addr == "" {
		return nil
	}
	return &daemon.MetricsConfig{Addr: addr, AllowNonLoopback: anyAddr}
}

func roomsConfig(on bool, c daemon.RoomsConfig) *daemon.RoomsConfig {
	if !on {
		return nil
	}
	return &c
}

func newLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("bad --log-format %q: want text or json", format)
}

// providerFlags collects --provider and --provider-key-env.
type providerFlags struct {
	urls map[string]string
	envs map[string]string
}

func (p *providerFlags) add(v string) error {
	name, url, err := model.ParseProviderFlag(v)
	if err != nil {
		return err
	}
	if p.urls == nil {
		p.urls = make(map[string]string)
	}
	if _, dup := p.urls[name]; dup {
		return fmt.Errorf("provider %q is given twice", name)
	}
	p.urls[name] = url
	return nil
}

func (p *providerFlags) addKeyEnv(v string) error {
	name, env, err := model.ParseProviderKeyEnvFlag(v)
	if err != nil {
		return err
	}
	if p.envs == nil {
		p.envs = make(map[string]string)
	}
	if _, dup := p.envs[name]; dup {
		return fmt.Errorf("provider %q has its key variable given twice", name)
	}
	p.envs[name] = env
	return nil
}

// resolve pairs each provider with its key, read from the environment once, now. A key
// variable for a provider that is not configured is an error: it is almost surely a typo.
func (p *providerFlags) resolve(getenv func(string) string) (map[string]session.Provider, error) {
	out := make(map[string]session.Provider, len(p.urls))
	for name, url := range p.urls {
		out[name] = session.Provider{Name: name, BaseURL: url}
	}
	for name, env := range p.envs {
		prov, ok := out[name]
		if !ok {
			return nil, fmt.Errorf("--provider-key-env names provider %q, which no --provider configures", name)
		}
		// A key pasted with its newline would be sent as is and refused by the provider.
		prov.KeyEnv, prov.Key = env, strings.TrimSpace(getenv(env))
		out[name] = prov
	}
	return out, nil
}

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
