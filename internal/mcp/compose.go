package mcp

// Composed tools: the reference filesystem server's conveniences (head and tail by lines,
// several files in one call, a recursive tree, a file-name search, an edit preview with a
// unified diff, sorted listings), each built in the bridge from the six operations of the
// host tool-adapter protocol and nothing else.
//
// Design: a composed tool is a small program of invokeTool calls, sent through the same
// leased daemon connections as every other call. The bridge never opens a file: every byte
// it returns came from fs.read or fs.list through airlockd, which checks each path against
// the grant and walks it beneath the session's cwd, and through airlock-fs, which confines it
// again. A composed tool is listed only when the grant holds every operation it calls, so it
// can do nothing the grant's own tools could not do one call at a time; and it stays within
// the grant's limits: no call asks for more than one response frame holds, no more calls run
// at once than the adapter serves concurrently (and at most 4), and what a tool returns is
// bounded like one read (maxResponseBytes, at most 4 MiB), with `truncated` set and a line of
// text saying what was left out whenever a bound cut it. Move, mkdir, delete and binary
// content are not composed: the six operations cannot express them, on purpose.

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// composedDef is one composed tool: the operations it needs (those it calls, and the one it
// previews), its MCP tool for a grant's limits, and its program.
type composedDef struct {
	name  string
	needs []string
	// previews is the operation among needs that the tool does not call but shows the
	// effect of (fs_edit_preview: fs.edit), or "".
	previews string
	tool     func(l tooladapter.Limits) *sdk.Tool
	run      func(c *composedCall, args json.RawMessage) (*sdk.CallToolResult, *protocol.Error)
}

// composedDefs are the composed tools, in the order tools/list shows them.
var composedDefs = []*composedDef{
	{name: "fs_head", needs: []string{tooladapter.OpRead}, tool: headTool, run: runHead},
	{name: "fs_tail", needs: []string{tooladapter.OpRead, tooladapter.OpStat}, tool: tailTool, run: runTail},
	{name: "fs_read_many", needs: []string{tooladapter.OpRead}, tool: readManyTool, run: runReadMany},
	{name: "fs_tree", needs: []string{tooladapter.OpList}, tool: treeTool, run: runTree},
	{name: "fs_find", needs: []string{tooladapter.OpList}, tool: findTool, run: runFind},
	{name: "fs_list_sorted", needs: []string{tooladapter.OpList}, tool: listSortedTool, run: runListSorted},
	{name: "fs_edit_preview", needs: []string{tooladapter.OpRead, tooladapter.OpEdit}, previews: tooladapter.OpEdit, tool: editPreviewTool, run: runEditPreview},
}

// composedTools returns the specs of the composed tools whose operations ops all hold. Each
// description says what the session's policy (rules) decides for the operations the tool
// calls, every one of which passes the daemon's gate, and for the one it previews: a tool
// whose calls a rule denies or sends to the operator said nothing of it, so that fs_tree
// under a policy that asks before fs.list asked the operator once per directory, and
// fs_edit_preview under read-only offered an fs_edit that was refused
// (TestComposedToolsSayThePolicy).
func composedTools(ops []string, l tooladapter.Limits, limitsFP string, rules *policy.Policy) []toolSpec {
	granted := map[string]bool{}
	for _, op := range ops {
		granted[op] = true
	}
	var out []toolSpec
next:
	for _, d := range composedDefs {
		for _, op := range d.needs {
			if !granted[op] {
				continue next
			}
		}
		t := d.tool(l)
		t.Name = d.name
		note := ""
		for _, op := range d.needs {
			about := op + ", which this tool calls"
			if op == d.previews {
				about = op + ", which " + fsToolName(op) + " calls to make the change shown"
			}
			note += policyNoteOn(rules, op, about)
		}
		t.Description += note
		out = append(out, toolSpec{tool: t, kind: kindComposed, composed: d, limits: l,
			fingerprint: "composed\x00" + d.name + "\x00" + limitsFP + "\x00" + note})
	}
	return out
}

// composeBudget is what one composed call may return (file content, a diff, listing text)
// and the most one of its fs.read calls asks for: what one response frame of the grant holds,
// less room for the frame, and at most 4 MiB (fs.read's own bound).
func composeBudget(l tooladapter.Limits) int64 {
	return min(int64(tooladapter.MaxContentBytes), max(l.MaxResponseBytes-1024, 1))
}

// composeParallel is how many calls a composed call runs at once: the adapter's concurrency,
// at most 4, so that one composed call never queues behind itself nor fills the adapter.
func composeParallel(l tooladapter.Limits) int {
	return int(min(max(l.MaxConcurrentRequests, 1), 4))
}

// composedCall is one call of a composed tool.
type composedCall struct {
	b        *Bridge
	ctx      context.Context
	limits   tooladapter.Limits
	budget   int64
	parallel int
	progress *progress
	steps    float64 // progress reported so far
	client   string  // the MCP client's name, for the daemon's gate (door mcp)
}

// callComposed runs a composed tool. A cancelled call ends at once: the invokeTool in flight
// is aborted in the daemon (as a plain fs call is), and no further call is sent.
func (b *Bridge) callComposed(ctx context.Context, req *sdk.CallToolRequest, s toolSpec, clientName string, args json.RawMessage) (*sdk.CallToolResult, error) {
	c := &composedCall{b: b, ctx: ctx, limits: s.limits, budget: composeBudget(s.limits),
		parallel: composeParallel(s.limits), progress: newProgress(ctx, req, true), client: clientName}
	res, perr := s.composed.run(c, args)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if perr != nil {
		return errorResult(perr), nil
	}
	return res, nil
}

// step reports progress of a call that walks: n more units done, with a message. MCP asks
// progress to increase; it has no total, since a walk cannot know one.
func (c *composedCall) step(n int, msg string) {
	p := c.progress
	if p.ss == nil || p.token == nil || n == 0 {
		return
	}
	c.steps += float64(n)
	p.ss.NotifyProgress(p.ctx, &sdk.ProgressNotificationParams{ProgressToken: p.token, Progress: c.steps, Message: msg})
}

// errCancelled stands for a call whose context ended; callComposed answers it with the
// context's error.
var errCancelled = &protocol.Error{Code: protocol.CodeInternal, Message: "cancelled"}

// invoke runs one operation through invokeTool with a fresh key (composed tools call only
// effect-free operations) and returns the adapter's result data. A cancelled call is aborted
// in the daemon and answers errCancelled.
func (c *composedCall) invoke(op string, payload any) (json.RawMessage, *protocol.Error) {
	args, err := json.Marshal(payload)
	if err != nil {
		return nil, &protocol.Error{Code: protocol.CodeInternal, Message: "cannot encode " + op + " arguments"}
	}
	data, perr, _, err := c.b.invokeTool(c.ctx, op, c.b.keys.fresh(), c.client, args)
	if err != nil {
		return nil, errCancelled
	}
	return data, perr
}

// wireRead is fs.read's payload.
type wireRead struct {
	Path     string `json:"path"`
	Offset   int64  `json:"offset"`
	MaxBytes int64  `json:"maxBytes"`
}

// read runs fs.read of maxBytes bytes at offset.
func (c *composedCall) read(path string, offset, maxBytes int64) (*readResult, *protocol.Error) {
	data, perr := c.invoke(tooladapter.OpRead, wireRead{Path: path, Offset: offset, MaxBytes: maxBytes})
	if perr != nil {
		return nil, perr
	}
	var r readResult
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon's tool result is not readable"}
	}
	return &r, nil
}

// listEntry is one entry of fs.list's result.
type listEntry struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modifiedAt,omitempty"`
}

type listResult struct {
	Entries   []listEntry `json:"entries"`
	Truncated bool        `json:"truncated"`
}

type wireList struct {
	Path       string `json:"path"`
	MaxEntries int64  `json:"maxEntries"`
}

// list runs fs.list of at most maxEntries entries.
func (c *composedCall) list(path string, maxEntries int64) (*listResult, *protocol.Error) {
	data, perr := c.invoke(tooladapter.OpList, wireList{Path: path, MaxEntries: maxEntries})
	if perr != nil {
		return nil, perr
	}
	var r listResult
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon's tool result is not readable"}
	}
	return &r, nil
}

// all runs f(i) for i in [0, n) with at most c.parallel running at once, and waits for them.
func (c *composedCall) all(n int, f func(i int)) {
	if n == 1 || c.parallel == 1 {
		for i := range n {
			f(i)
		}
		return
	}
	sem := make(chan struct{}, c.parallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// argError is the error of an argument the bridge checks itself (a composed tool's own, such as
// fs_head's lines), naming the argument and what it must be.
func argError(field, must string) *protocol.Error {
	return argFault(field, "argument %s must be %s", field, must)
}

// argFault is the error of a composed tool's argument that the bridge refuses, details.field
// naming it. Its code is adapter_request_invalid, the one the six operations' tools answer an
// argument with that does not fit their schema (the daemon's payload check), with the same
// details (indeterminate false: nothing ran), not the capability protocol's invalid_args: a
// hint depends on the code alone (internal/hint), and invalid_args's must also cover a device
// refusing values with no message, which is no advice for a filesystem tool; the fs tools'
// code has a hint that says to correct the member the message names. So every fs tool's
// argument fault, plain or composed (fs_edit_preview answers both), has one code and one
// hint.
func argFault(field, format string, args ...any) *protocol.Error {
	return protocol.Errorf(tooladapter.CodeRequestInvalid, format, args...).
		With(tooladapter.DetailField, field).With(tooladapter.DetailIndeterminate, false)
}

// decodeArgs decodes a composed tool's arguments into v (a struct of the tool's members,
// optional ones pointers): an unknown member, a value of the wrong type and a missing required
// member are refused naming the member and saying what it must be (must[member]).
func decodeArgs(args json.RawMessage, v any, must map[string]string, required ...string) *protocol.Error {
	if err := ndjson.Decode(args, v, ndjson.Closed); err != nil {
		var de *ndjson.DecodeError
		if !errors.As(err, &de) || de.Path == "" {
			return argError("arguments", "one JSON object")
		}
		field := de.Path
		if i := strings.IndexAny(field, ".["); i > 0 {
			field = field[:i]
		}
		if de.Reason == ndjson.ReasonUnknownField || must[field] == "" {
			return argFault(field, "%s is not an argument of this tool", field)
		}
		return argError(field, must[field])
	}
	var present map[string]json.RawMessage
	_ = json.Unmarshal(args, &present) // it decoded above
	for _, f := range required {
		if _, ok := present[f]; !ok {
			return argFault(f, "argument %s is required: %s", f, must[f])
		}
	}
	return nil
}

// intArg returns *p, or def when absent, checking lo ≤ v ≤ hi.
func intArg(field string, p *int64, def, lo, hi int64) (int64, *protocol.Error) {
	if p == nil {
		return def, nil
	}
	if *p < lo || *p > hi {
		return 0, argError(field, "an integer from "+strconv.FormatInt(lo, 10)+" to "+strconv.FormatInt(hi, 10))
	}
	return *p, nil
}

// isCancelled reports whether perr is errCancelled.
func isCancelled(perr *protocol.Error) bool { return perr == errCancelled }

// joinPath joins a root-relative directory and a relative path ("." is the root).
func joinPath(dir, rel string) string {
	if dir == "." {
		return rel
	}
	return dir + "/" + rel
}

// composedResult is a successful result: structured content and its text.
func composedResult(structured any, text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{StructuredContent: structured, Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

// readOnlyTool returns a read-only tool with the given description and schemas.
func readOnlyTool(title, desc string, in, out schema) *sdk.Tool {
	return &sdk.Tool{Title: title, Description: desc, InputSchema: in, OutputSchema: out,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)}}
}
