package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
)

// resourceNone is the JSON value of a resource member that loads nothing.
var resourceNone = json.RawMessage(`"` + protocol.ResourceNone + `"`)

// generationFlag registers the required --generation flag.
func generationFlag(fs *flag.FlagSet) *int64 {
	return fs.Int64("generation", 0, "session generation (required)")
}

// checkGeneration reports a missing or negative --generation as a usage error.
func checkGeneration(fs *flag.FlagSet, gen int64) error {
	if !isSet(fs, "generation") {
		return usageErrorf("--generation is required")
	}
	if gen < 0 {
		return usageErrorf("--generation must not be negative")
	}
	return nil
}

// sessionOpen opens a session generation, or reuses it when the same generation was opened with
// the same policy.
func (a *app) sessionOpen(ctx context.Context, args []string) int {
	o, fs := a.newCommand("session open")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {created, session}")
	gen := generationFlag(fs)
	cwd := fs.String("cwd", "", "working directory of the session (required; a relative one is made absolute)")
	name := fs.String("name", "", "display name")
	mode := fs.String("mode", protocol.ModeNew, "conversation storage: new, open, continue or memory")
	path := fs.String("path", "", "conversation file to resume (with --mode open)")
	sessionDir := fs.String("session-dir", "", "directory for conversation files (protocol 2.x)")
	agentDir := fs.String("agent-dir", "", "agent configuration directory")
	model := fs.String("model", "", "model as PROVIDER/ID")
	thinking := fs.String("thinking-level", "", "thinking level of the model (needs --model)")
	promptFile := fs.String("system-prompt-file", "", "file whose text replaces the system prompt (protocol 2.x)")
	descriptor := fs.String("descriptor", "", "host tool-adapter descriptor JSON `file` (- for stdin), as airlock-fs grant prints it (protocol 2.x)")
	fsOps := fs.String("fs-ops", "", "grant the session its cwd for these operations (`fs.read,fs.list,…`) from the airlock-fs airlockd runs, which revokes the grant when the generation ends (protocol 2.x; instead of --descriptor)")
	version := fs.String("protocol", protocol.Version2, "protocol version of the open: 2.0 or 1.0")
	roomID := fs.String("room", "", "give the model the capabilities published into this `room` as tools (protocol 2.x)")
	pol := fs.String("policy", "", "the session's policy: a built-in `NAME` (allow-all, read-only, ask-writes, deny-all) or a policy FILE (a path with a /) that the daemon reads (protocol 2.x)")
	pos, code, done := a.parse(o, fs, args, "SESSION")
	if done {
		return code
	}
	if err := checkGeneration(fs, *gen); err != nil {
		return a.failUsage(o, err)
	}
	p, err := openPayload(fs, openFlags{
		cwd: *cwd, name: *name, mode: *mode, path: *path, sessionDir: *sessionDir, agentDir: *agentDir,
		model: *model, thinking: *thinking, promptFile: *promptFile,
	})
	if err != nil {
		return a.failUsage(o, err)
	}
	if *fsOps != "" {
		if *descriptor != "" {
			return a.failUsage(o, usageErrorf("--fs-ops and --descriptor both grant tools: give one"))
		}
		ops, _ := json.Marshal(parseOps(*fsOps))
		mode, _ := json.Marshal(protocol.ToolsManagedFS)
		tools, _ := json.Marshal(protocol.ToolsResource{Mode: mode, Operations: ops})
		p.Resources.Tools = tools
	}
	if *descriptor != "" {
		raw, err := a.readDescriptor(*descriptor)
		if err != nil {
			return a.failUsage(o, err)
		}
		mode, _ := json.Marshal(protocol.ToolsHostAdapter)
		tools, _ := json.Marshal(protocol.ToolsResource{Mode: mode, Descriptor: raw})
		p.Resources.Tools = tools
	}
	if *version != protocol.Version1 && *version != protocol.Version2 {
		return a.failUsage(o, usageErrorf("--protocol must be %s or %s", protocol.Version2, protocol.Version1))
	}
	if *roomID != "" {
		if *version == protocol.Version1 {
			return a.failUsage(o, usageErrorf("--room needs protocol 2.x"))
		}
		p.Room, _ = json.Marshal(*roomID)
	}
	if *pol != "" {
		if *version == protocol.Version1 {
			return a.failUsage(o, usageErrorf("--policy needs protocol 2.x"))
		}
		ref, err := policyRef(*pol)
		if err != nil {
			return a.failUsage(o, err)
		}
		p.Policy = ref
	}
	data, err := a.call(ctx, *version, client.Command{
		Operation: protocol.OpOpen, SessionID: pos[0], Generation: gen, Payload: p,
	})
	if err != nil {
		return o.fail(err)
	}
	var r protocol.OpenResult
	if err := decodeData(data, &r); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		if r.Created {
			fmt.Fprintln(w, "created")
		} else {
			fmt.Fprintln(w, "reused")
		}
		printSnapshot(w, &r.Session)
	})
}

// openFlags are the flags of session open that shape the payload.
type openFlags struct {
	cwd, name, mode, path, sessionDir, agentDir, model, thinking, promptFile string
}

// maxPromptFileBytes bounds what is read of --system-prompt-file: the daemon's limit in code
// points, at four bytes each at most.
const maxPromptFileBytes = 4 * protocol.MaxSystemPromptLen

// openPayload builds the open payload: every resource "none", systemPrompt only from a file.
// The daemon validates the values; this checks only what the command line must get right.
func openPayload(fs *flag.FlagSet, f openFlags) (*protocol.OpenPayload, error) {
	if f.cwd == "" {
		return nil, usageErrorf("--cwd is required")
	}
	switch f.mode {
	case protocol.ModeNew, protocol.ModeOpen, protocol.ModeContinue, protocol.ModeMemory:
	default:
		return nil, usageErrorf("--mode must be new, open, continue or memory")
	}
	p := &protocol.OpenPayload{
		Session: &protocol.OpenSession{Mode: f.mode},
		Resources: &protocol.OpenResource{
			Extensions: resourceNone, Skills: resourceNone, PromptTemplates: resourceNone,
			Themes: resourceNone, ContextFiles: resourceNone, Tools: resourceNone,
		},
	}
	cwd, err := filepath.Abs(f.cwd)
	if err != nil {
		return nil, usageErrorf("--cwd: %v", err)
	}
	p.Cwd = cwd
	// The daemon wants absolute, clean paths; a relative one means the caller's directory.
	var sessionDir *string
	for _, opt := range []struct {
		name  string
		value string
		dst   **string
	}{
		{"path", f.path, &p.Session.Path},
		{"session-dir", f.sessionDir, &sessionDir},
		{"agent-dir", f.agentDir, &p.AgentDir},
	} {
		if !isSet(fs, opt.name) {
			continue
		}
		if opt.value == "" {
			return nil, usageErrorf("--%s must not be empty", opt.name)
		}
		abs, err := filepath.Abs(opt.value)
		if err != nil {
			return nil, usageErrorf("--%s: %v", opt.name, err)
		}
		*opt.dst = &abs
	}
	if sessionDir != nil {
		p.Session.SessionDir, _ = json.Marshal(*sessionDir)
	}
	if isSet(fs, "name") {
		p.Name = &f.name
	}
	if f.model != "" {
		provider, id, ok := strings.Cut(f.model, "/")
		if !ok || provider == "" || id == "" {
			return nil, usageErrorf("--model must be PROVIDER/ID")
		}
		p.Model = &protocol.OpenModel{Provider: provider, ID: id}
		if f.thinking != "" {
			p.Model.ThinkingLevel = &f.thinking
		}
	} else if f.thinking != "" {
		return nil, usageErrorf("--thinking-level needs --model")
	}
	if f.promptFile != "" {
		prompt, err := readPrompt(f.promptFile)
		if err != nil {
			return nil, err
		}
		p.Resources.SystemPrompt = &prompt
	}
	return p, nil
}

func readPrompt(name string) (string, error) {
	fh, err := os.Open(name)
	if err != nil {
		return "", usageErrorf("--system-prompt-file: %v", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxPromptFileBytes+1))
	switch {
	case err != nil:
		return "", usageErrorf("--system-prompt-file: %v", err)
	case len(b) > maxPromptFileBytes:
		return "", usageErrorf("--system-prompt-file: larger than %d bytes", maxPromptFileBytes)
	case !utf8.Valid(b):
		return "", usageErrorf("--system-prompt-file: not UTF-8 text")
	}
	return string(b), nil
}

func printSnapshot(w io.Writer, s *protocol.SessionSnapshot) {
	t := newTable(w)
	fmt.Fprintf(t, "session\t%s\n", orDash(s.SessionID))
	fmt.Fprintf(t, "generation\t%d\n", s.Generation)
	fmt.Fprintf(t, "name\t%s\n", orDash(s.Name))
	fmt.Fprintf(t, "state\t%s\n", orDash(s.State))
	fmt.Fprintf(t, "residency\t%s\n", orDash(s.Residency))
	fmt.Fprintf(t, "protocol\t%s\n", orDash(s.ProtocolVersion))
	fmt.Fprintf(t, "sequence\t%d\n", s.Sequence)
	fmt.Fprintf(t, "queuedTurns\t%d\n", s.QueuedTurns)
	if s.Model != nil {
		fmt.Fprintf(t, "model\t%s/%s\n", clean(s.Model.Provider), clean(s.Model.ID))
	}
	if s.ActiveRequestID != "" {
		fmt.Fprintf(t, "activeRequest\t%s\n", clean(s.ActiveRequestID))
	}
	if s.LastErrorCode != "" {
		fmt.Fprintf(t, "lastError\t%s\n", clean(s.LastErrorCode))
	}
	fmt.Fprintf(t, "attached\t%d\n", s.Attached)
	fmt.Fprintf(t, "lastUsed\t%s\n", timestamp(s.LastUsedAt))
	fmt.Fprintf(t, "idle\t%s\n", millis(s.IdleForMs))
	t.Flush()
}

// sessionClose closes a session generation; --delete also drops its durable records.
func (a *app) sessionClose(ctx context.Context, args []string) int {
	o, fs := a.newCommand("session close")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {closed, deleted}")
	gen := generationFlag(fs)
	del := fs.Bool("delete", false, "delete the session's durable records (retainSession:false)")
	pos, code, done := a.parse(o, fs, args, "SESSION")
	if done {
		return code
	}
	if err := checkGeneration(fs, *gen); err != nil {
		return a.failUsage(o, err)
	}
	var p protocol.ClosePayload
	if *del {
		retain := false
		p.RetainSession = &retain
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{
		Operation: protocol.OpClose, SessionID: pos[0], Generation: gen, Payload: p,
	})
	if err != nil {
		return o.fail(err)
	}
	var r protocol.CloseResult
	if err := decodeData(data, &r); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		id := clean(pos[0])
		if r.Closed {
			fmt.Fprintf(w, "closed %s generation %d\n", id, *gen)
		} else {
			fmt.Fprintf(w, "%s generation %d was not resident\n", id, *gen)
		}
		switch {
		case *del && r.Deleted:
			fmt.Fprintf(w, "deleted the durable records of %s\n", id)
		case *del:
			fmt.Fprintf(w, "%s had no durable records\n", id)
		default:
			fmt.Fprintf(w, "kept the catalog record of %s (dormant)\n", id)
		}
	})
}

// sessionList pages through the durable catalog.
func (a *app) sessionList(ctx context.Context, args []string) int {
	o, fs := a.newCommand("session list")
	fs.BoolVar(&o.json, "json", false, `print the JSON envelope; data is {"sessions": [...]}, every page merged, with "more": true when --limit cut the list`)
	limit := fs.Int("limit", 0, "list at most this many sessions (0: all)")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *limit < 0 {
		return a.failUsage(o, usageErrorf("--limit must not be negative"))
	}
	raws, recs, more, err := a.listAll(ctx, *limit)
	if err != nil {
		return o.fail(err)
	}
	data := map[string]any{"sessions": raws}
	if more {
		data["more"] = true
	}
	return o.succeed(data, func(w io.Writer) {
		t := newTable(w)
		fmt.Fprintln(t, "SESSION\tGEN\tRESIDENCY\tSTATE\tREVISION\tUPDATED")
		for _, r := range recs {
			fmt.Fprintf(t, "%s\t%d\t%s\t%s\t%d\t%s\n", orDash(r.SessionID), r.Generation, orDash(r.Residency), orDash(r.State), r.Revision, timestamp(r.UpdatedAt))
		}
		t.Flush()
		if more {
			fmt.Fprintf(a.stderr, "airlock: the catalog holds more than %d sessions: raise --limit, or --limit 0 for all\n", *limit)
		}
	})
}

// listAll follows listSessions cursors on one connection until the catalog ends or limit (when
// positive) records are in hand. It returns each record raw, for --json, and decoded, and
// whether the catalog holds more than limit.
func (a *app) listAll(ctx context.Context, limit int) (raws []json.RawMessage, recs []protocol.CatalogRecord, more bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	c, err := a.dial(ctx, protocol.Version2)
	if err != nil {
		return nil, nil, false, err
	}
	defer c.Close()
	raws = []json.RawMessage{}
	// A daemon whose cursors repeat would otherwise keep this loop going forever.
	seen := map[string]bool{"": true}
	cursor := ""
	for {
		n := protocol.MaxPageSize
		if limit > 0 {
			n = min(n, limit-len(raws))
		}
		data, err := exchange(ctx, c, client.Command{
			Operation: protocol.OpListSessions,
			Payload:   protocol.ListSessionsPayload{Cursor: cursor, Limit: &n},
		})
		if err != nil {
			return nil, nil, false, err
		}
		var page struct {
			Sessions   []json.RawMessage `json:"sessions"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := decodeData(data, &page); err != nil {
			return nil, nil, false, err
		}
		for _, raw := range page.Sessions {
			var r protocol.CatalogRecord
			if err := decodeData(raw, &r); err != nil {
				return nil, nil, false, err
			}
			raws, recs = append(raws, raw), append(recs, r)
		}
		if limit > 0 && len(raws) >= limit {
			return raws[:limit], recs[:limit], len(raws) > limit || page.NextCursor != "", nil
		}
		if page.NextCursor == "" {
			return raws, recs, false, nil
		}
		if seen[page.NextCursor] || len(page.Sessions) == 0 {
			return nil, nil, false, protocolErrorf("listSessions returned a cursor that does not advance")
		}
		seen[page.NextCursor] = true
		cursor = page.NextCursor
	}
}

// sessionShow prints a session's catalog record, and its runtime snapshot when resident.
func (a *app) sessionShow(ctx context.Context, args []string) int {
	o, fs := a.newCommand("session show")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {record, snapshot}")
	pos, code, done := a.parse(o, fs, args, "SESSION")
	if done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpDescribeSession, SessionID: pos[0]})
	if err != nil {
		return o.fail(err)
	}
	var d protocol.SessionDescription
	if err := decodeData(data, &d); err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		printRecord(w, &d.Record)
		if d.Snapshot != nil {
			fmt.Fprintln(w, "\nresident:")
			printSnapshot(w, d.Snapshot)
		}
	})
}

func printRecord(w io.Writer, r *protocol.CatalogRecord) {
	t := newTable(w)
	fmt.Fprintf(t, "session\t%s\n", orDash(r.SessionID))
	fmt.Fprintf(t, "generation\t%d\n", r.Generation)
	fmt.Fprintf(t, "name\t%s\n", orDash(r.Name))
	fmt.Fprintf(t, "residency\t%s\n", orDash(r.Residency))
	fmt.Fprintf(t, "state\t%s\n", orDash(r.State))
	fmt.Fprintf(t, "revision\t%d\n", r.Revision)
	fmt.Fprintf(t, "protocol\t%s\n", orDash(r.ProtocolVersion))
	fmt.Fprintf(t, "cwd\t%s\n", orDash(r.Policy.Cwd))
	fmt.Fprintf(t, "mode\t%s\n", orDash(r.Policy.Mode))
	if r.Policy.Model != nil {
		fmt.Fprintf(t, "model\t%s/%s\n", clean(r.Policy.Model.Provider), clean(r.Policy.Model.ID))
	}
	if len(r.Policy.Rules) > 0 {
		fmt.Fprintf(t, "rules\t%s\n", rulesSummary(r.Policy.Rules))
	}
	fmt.Fprintf(t, "policyDigest\t%s\n", orDash(r.PolicyDigest))
	fmt.Fprintf(t, "created\t%s\n", timestamp(r.CreatedAt))
	fmt.Fprintf(t, "updated\t%s\n", timestamp(r.UpdatedAt))
	fmt.Fprintf(t, "lastUsed\t%s\n", timestamp(r.LastUsedAt))
	if lt := r.LastTerminal; lt != nil {
		fmt.Fprintf(t, "lastTerminal\t%s at %s %s\n", orDash(lt.State), timestamp(lt.At), clean(lt.ErrorCode))
	}
	if rc := r.Recovery; rc != nil {
		fmt.Fprintf(t, "recovery\t%s %s retryable=%t\n", orDash(rc.State), orDash(rc.Code), rc.Retryable)
	}
	t.Flush()
}

// sessionAttach attaches to one session generation and copies every line the daemon then sends
// to stdout, unchanged, until ctx ends (exit 0) or the daemon closes the connection (exit 1).
func (a *app) sessionAttach(ctx context.Context, args []string) int {
	o, fs := a.newCommand("session attach")
	gen := generationFlag(fs)
	pos, code, done := a.parse(o, fs, args, "SESSION")
	if done {
		return code
	}
	if err := checkGeneration(fs, *gen); err != nil {
		return a.failUsage(o, err)
	}
	dctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	c, err := a.dial(dctx, protocol.Version2)
	if err != nil {
		return o.fail(err)
	}
	defer c.Close()
	data, err := exchange(dctx, c, client.Command{Operation: protocol.OpAttach, SessionID: pos[0], Generation: gen})
	if err != nil {
		return o.fail(err)
	}
	var r protocol.AttachResult
	if err := decodeData(data, &r); err != nil {
		return o.fail(err)
	}
	fmt.Fprintf(a.stderr, "attached %s generation=%d sequence=%d\n", clean(pos[0]), r.Generation, r.Sequence)
	for {
		select {
		case <-ctx.Done():
			return exitOK
		case line, ok := <-c.Events():
			if !ok {
				return o.fail(transportErrorf(exitFailure, "the daemon closed the connection"))
			}
			if _, err := o.stdout.Write(append(line, '\n')); err != nil {
				return o.fail(transportErrorf(exitFailure, "cannot write events: %v", err))
			}
		}
	}
}

// maxDescriptorBytes bounds what is read of --descriptor; real descriptors are under 2 KiB.
const maxDescriptorBytes = 64 << 10

// readDescriptor reads a tool-adapter descriptor from a file or stdin. It holds a capability
// handle: it is passed through to the daemon and never printed.
func (a *app) readDescriptor(name string) (json.RawMessage, error) {
	var r io.Reader
	if name == "-" {
		r = a.stdin
	} else {
		fh, err := os.Open(name)
		if err != nil {
			return nil, usageErrorf("--descriptor: %v", err)
		}
		defer fh.Close()
		r = fh
	}
	if r == nil {
		return nil, usageErrorf("--descriptor -: no standard input")
	}
	b, err := readBounded(r, maxDescriptorBytes, "--descriptor")
	if err != nil {
		return nil, err
	}
	raw := json.RawMessage(bytes.TrimSpace(b))
	if !json.Valid(raw) || len(raw) == 0 || raw[0] != '{' {
		return nil, usageErrorf("--descriptor: not a JSON object")
	}
	return raw, nil
}

// rulesSummary is one line of what a session's policy decides for each fs operation, with
// its name: "ask-writes: fs.list allow, …, fs.write ask", and whether its agent may propose
// adapters.
func rulesSummary(raw json.RawMessage) string {
	p, err := policy.Parse(raw)
	if err != nil {
		return "unreadable (every call is denied)"
	}
	var parts []string
	for _, op := range policy.FSOperations {
		parts = append(parts, op+" "+p.Summary(op))
	}
	s := strings.Join(parts, ", ") + "; capabilities: see --json"
	if p.AllowsProposals() {
		s += "; adapter proposals allowed"
	}
	if p.Name() != "" {
		s = clean(p.Name()) + ": " + s
	}
	return s
}
