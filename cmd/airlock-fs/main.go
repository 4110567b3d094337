// Command airlock-fs is the reference host tool adapter: `airlock-fs serve` runs the service
// (internal/fsadapter/server), and `grant`, `grants` and `revoke-grant` administer its
// in-memory grants over the admin socket. `grant` prints the descriptor for
// `airlock session open … --descriptor -`; it is the only output that ever contains a
// capability handle.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/airlockhq/airlock/internal/flagargs"
	"github.com/airlockhq/airlock/internal/fsadapter/server"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/ownersock"
	"github.com/airlockhq/airlock/internal/paths"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/version"
)

// adminTimeout bounds one admin request from dial to answer; the server answers at once, and
// opening a grant root is a few system calls.
const adminTimeout = 10 * time.Second

// maxAdminResponseBytes bounds an admin answer: a grants list of MaxGrants entries fits.
const maxAdminResponseBytes = 8 << 20

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

const usageText = `usage:
  airlock-fs serve [--socket PATH] [--admin-socket PATH] [--log-level L] [--log-format text|json] [--exit-on-stdin-eof]
                   [--max-unbound-connections 128 --max-admin-connections 32
                   --max-connections-per-peer 32 --bind-timeout 5s --admin-line-timeout 10s]
  airlock-fs grant [--admin-socket PATH] --root DIR --host-instance ID --session ID --generation N
                   --operations fs.read,fs.list,… [--max-concurrent 4 --max-queued 16
                   --timeout-ms 30000 --max-request-bytes N --max-response-bytes N
                   --max-idempotency-keys 256 --idempotency-ttl-ms 3600000 --adapter-id ID]
  airlock-fs grants [--admin-socket PATH] [--json]
  airlock-fs revoke-grant [--admin-socket PATH] GRANT_ID
  airlock-fs version
`

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, sigs))
}

// cliError is a failure with a machine code, printed as "airlock-fs: CODE: message".
type cliError struct{ code, msg string }

func (e *cliError) Error() string { return e.code + ": " + e.msg }

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func run(args []string, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(args[1:], os.Stdin, stderr, sigs)
	case "grant":
		err = grant(args[1:], stdout, stderr)
	case "grants":
		err = grants(args[1:], stdout, stderr)
	case "revoke-grant":
		err = revokeGrant(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "airlock-fs", version.Version, "adapterVersion", server.AdapterVersion(version.Version))
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usageText)
	default:
		err = usagef("unknown command %q", args[0])
	}
	var ue *usageError
	var ce *cliError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		// The flag package printed the command's flags: asked for, not a mistake.
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "airlock-fs: usage: %s\n%s", ue.msg, usageText)
		return exitUsage
	case errors.As(err, &ce):
		fmt.Fprintf(stderr, "airlock-fs: %s: %s\n", ce.code, ce.msg)
	default:
		fmt.Fprintf(stderr, "airlock-fs: error: %v\n", err)
	}
	return exitFail
}

func newFlags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("airlock-fs "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin-socket", filepath.Join(paths.RuntimeDir(), "airlock-fs.admin.sock"), "admin socket `path`")
	return fs, admin
}

// parse parses a command's flags and positional arguments, which may come in any order, as
// airlock's own commands take them (flag alone stops at the first positional one, so
// "revoke-grant g-… --admin-socket PATH" was refused as a wrong argument count). The positional
// arguments are left as fs.Args().
func parse(fs *flag.FlagSet, args []string, positional int) error {
	pos, err := flagargs.Parse(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	if len(pos) != positional {
		if positional == 0 {
			return usagef("unexpected argument %q", pos[0])
		}
		return usagef("%s takes %d argument(s)", strings.TrimPrefix(fs.Name(), "airlock-fs "), positional)
	}
	// Leave the positional arguments where the commands read them.
	return fs.Parse(append([]string{"--"}, pos...))
}

func serve(args []string, stdin io.Reader, stderr io.Writer, sigs <-chan os.Signal) error {
	fs, admin := newFlags("serve", stderr)
	socket := fs.String("socket", filepath.Join(paths.RuntimeDir(), "airlock-fs.sock"), "serving socket `path` (the descriptors' endpoint; at most 100 bytes)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	onEOF := fs.Bool("exit-on-stdin-eof", false, "stop, as on SIGTERM, when standard input ends: a supervising parent (airlockd) holds it open, so the adapter and its grants never outlive the parent, however it ends")
	conns := server.DefaultConnLimits
	fs.IntVar(&conns.MaxUnbound, "max-unbound-connections", conns.MaxUnbound, "maximum serving connections that have not bound yet (lowered to fit the descriptor limit)")
	fs.IntVar(&conns.MaxAdmin, "max-admin-connections", conns.MaxAdmin, "maximum admin connections (lowered to fit the descriptor limit)")
	fs.IntVar(&conns.MaxPerPeer, "max-connections-per-peer", conns.MaxPerPeer, "one client process's share of the unbound and of the admin connections")
	fs.DurationVar(&conns.BindTimeout, "bind-timeout", conns.BindTimeout, "deadline for a serving connection's bind line, from accept")
	fs.DurationVar(&conns.AdminLineTimeout, "admin-line-timeout", conns.AdminLineTimeout, "deadline for each admin request line, from accept or the last answer")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if conns.MaxUnbound < 1 || conns.MaxAdmin < 1 || conns.MaxPerPeer < 1 || conns.BindTimeout <= 0 || conns.AdminLineTimeout <= 0 {
		return usagef("connection limits and timeouts must be positive")
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("bad --log-level %q", *logLevel)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var log *slog.Logger
	switch *logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(stderr, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(stderr, opts))
	default:
		return usagef("bad --log-format %q: want text or json", *logFormat)
	}
	sock, err := filepath.Abs(*socket)
	if err != nil {
		return err
	}
	adminSock, err := filepath.Abs(*admin)
	if err != nil {
		return err
	}
	s, err := server.Start(server.Config{Socket: sock, AdminSocket: adminSock, Version: version.Version, Logger: log, Conns: conns})
	if err != nil {
		return &cliError{"serve_failed", err.Error()}
	}
	var eof chan struct{}
	if *onEOF {
		eof = make(chan struct{})
		// Owned by the process: it ends at EOF, or with the process after a signal.
		go func() {
			_, _ = io.Copy(io.Discard, stdin)
			close(eof)
		}()
	}
	select {
	case sig := <-sigs:
		log.Info("signal received; stopping", "signal", sig.String())
	case <-eof:
		log.Info("standard input ended; stopping")
	}
	return s.Close()
}

// call sends one admin request and returns the answer's data, or its error as a cliError.
func call(adminSocket string, req *server.AdminRequest) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", adminSocket)
	if err != nil {
		return nil, &cliError{"admin_unreachable", fmt.Sprintf("cannot connect to the admin socket %s (is airlock-fs serve running?)", adminSocket)}
	}
	defer nc.Close()
	// A descriptor from a server of another user could name its socket as the endpoint.
	if err := ownersock.CheckPeer(nc.(*net.UnixConn), os.Geteuid()); err != nil {
		return nil, &cliError{"admin_unreachable", fmt.Sprintf("the admin socket %s is served by another user (%v)", adminSocket, err)}
	}
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	b, err := ndjson.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := nc.Write(b); err != nil {
		return nil, &cliError{"admin_unreachable", "cannot write to the admin socket"}
	}
	line, err := ndjson.NewReader(nc, maxAdminResponseBytes).Next()
	if err != nil {
		return nil, &cliError{"admin_unreachable", "no answer on the admin socket"}
	}
	var resp struct {
		OK    bool            `json:"ok"`
		Data  json.RawMessage `json:"data"`
		Error *protocol.Error `json:"error"`
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, &cliError{"admin_protocol", "the admin socket answered with invalid JSON"}
	}
	if !resp.OK {
		if resp.Error == nil {
			return nil, &cliError{"admin_protocol", "the admin socket answered without an error"}
		}
		msg := resp.Error.Message
		if f, ok := resp.Error.Details["field"].(string); ok {
			msg += " (" + f + ")"
		}
		return nil, &cliError{resp.Error.Code, msg}
	}
	return resp.Data, nil
}

func grant(args []string, stdout, stderr io.Writer) error {
	fs, admin := newFlags("grant", stderr)
	root := fs.String("root", "", "grant root `directory` (required; made absolute)")
	host := fs.String("host-instance", "", "the daemon's hostInstanceId (required; airlock status shows it)")
	session := fs.String("session", "", "session id (required)")
	generation := fs.Int64("generation", -1, "session generation (required)")
	ops := fs.String("operations", "", "comma-separated operations in order, e.g. fs.read,fs.list (required)")
	adapterID := fs.String("adapter-id", server.DefaultAdapterID, "adapterId of the descriptor")
	dl := server.DefaultLimits
	limits := []struct {
		name, usage string
		def         int64
		v           *int64
	}{
		{"max-request-bytes", "maxRequestBytes", dl.MaxRequestBytes, new(int64)},
		{"max-response-bytes", "maxResponseBytes", dl.MaxResponseBytes, new(int64)},
		{"max-concurrent", "maxConcurrentRequests", dl.MaxConcurrentRequests, new(int64)},
		{"max-queued", "maxQueuedRequests", dl.MaxQueuedRequests, new(int64)},
		{"timeout-ms", "requestTimeoutMs", dl.RequestTimeoutMs, new(int64)},
		{"max-idempotency-keys", "maxIdempotencyKeys", dl.MaxIdempotencyKeys, new(int64)},
		{"idempotency-ttl-ms", "idempotencyTtlMs", dl.IdempotencyTtlMs, new(int64)},
	}
	for _, l := range limits {
		fs.Int64Var(l.v, l.name, l.def, "limit "+l.usage)
	}
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, req := range []string{"root", "host-instance", "session", "generation", "operations"} {
		if !set[req] {
			return usagef("--%s is required", req)
		}
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return usagef("--root: %v", err)
	}
	opList := strings.Split(*ops, ",")
	r := &server.AdminRequest{Op: server.OpGrant, Root: &absRoot, HostInstanceID: host, SessionID: session,
		Generation: generation, Operations: &opList, Limits: &server.LimitsRequest{}}
	if set["adapter-id"] {
		r.AdapterID = adapterID
	}
	dst := []**int64{&r.Limits.MaxRequestBytes, &r.Limits.MaxResponseBytes, &r.Limits.MaxConcurrentRequests,
		&r.Limits.MaxQueuedRequests, &r.Limits.RequestTimeoutMs, &r.Limits.MaxIdempotencyKeys, &r.Limits.IdempotencyTtlMs}
	for i, l := range limits {
		if set[l.name] {
			*dst[i] = l.v
		}
	}
	data, err := call(*admin, r)
	if err != nil {
		return err
	}
	return indent(stdout, data)
}

// indent prints raw indented, keeping its member order (the descriptor's is the protocol's).
func indent(w io.Writer, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return &cliError{"admin_protocol", "invalid data"}
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

func grants(args []string, stdout, stderr io.Writer) error {
	fs, admin := newFlags("grants", stderr)
	asJSON := fs.Bool("json", false, "print the list as JSON")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	data, err := call(*admin, &server.AdminRequest{Op: server.OpGrants})
	if err != nil {
		return err
	}
	if *asJSON {
		return indent(stdout, data)
	}
	var list struct {
		Grants []server.GrantInfo `json:"grants"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return &cliError{"admin_protocol", "invalid grants list"}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GRANT\tSESSION\tGENERATION\tCONNECTED\tOPERATIONS\tROOT")
	for _, g := range list.Grants {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%t\t%s\t%s\n", g.GrantID, g.SessionID, g.Generation, g.Connected,
			strings.Join(g.Operations, ","), g.Root)
	}
	return tw.Flush()
}

func revokeGrant(args []string, stdout, stderr io.Writer) error {
	fs, admin := newFlags("revoke-grant", stderr)
	if err := parse(fs, args, 1); err != nil {
		return err
	}
	id := fs.Arg(0)
	if _, err := call(*admin, &server.AdminRequest{Op: server.OpRevokeGrant, GrantID: &id}); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "revoked", id)
	return nil
}
