package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// toolKind says which daemon operation a tool calls.
type toolKind int

const (
	kindFS          toolKind = iota // invokeTool of a granted fs.* operation
	kindObserve                     // observeCapability
	kindAction                      // invokeCapability of one action
	kindRoomObserve                 // observeRoomCapability of the session's room
	kindRoomAction                  // invokeRoomCapability of one published action
	kindComposed                    // a composed tool: invokeTool calls of granted operations (compose.go)
	kindPropose                     // proposeAdapter for the session (proposals.go)
	kindProposals                   // listProposals of the session (proposals.go)
)

// toolSpec is one MCP tool and what it calls. Two specs with the same fingerprint are the
// same tool: a refresh that finds the same fingerprints changes nothing and notifies nobody.
type toolSpec struct {
	tool         *sdk.Tool
	kind         toolKind
	operation    string // fs.*: the granted operation
	capabilityID string // observe and actions
	action       string // actions
	room         string // room tools: the session's room
	provider     string // room tools: the publishing host
	fingerprint  string

	composed *composedDef       // composed tools
	limits   tooladapter.Limits // composed tools: the grant's limits
}

// schema is a JSON Schema under construction.
type schema = map[string]any

func closedObject(required []string, props schema) schema {
	if required == nil {
		required = []string{}
	}
	return schema{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

// fsToolName is the MCP name of an fs operation: "fs.read" becomes "fs_read". MCP allows dots
// in tool names, but many clients hand tool names to model APIs that allow only
// [A-Za-z0-9_-], and the session's own turns offer the same names.
func fsToolName(op string) string { return strings.ReplaceAll(op, ".", "_") }

var (
	pathProp = schema{
		"type":        "string",
		"description": `A path relative to the granted directory: "." is the directory itself; no leading "/", no "." or ".." segments, no "//".`,
		"minLength":   1,
		"maxLength":   4096,
	}
	digestProp = schema{
		"type":        "string",
		"description": "Only change the file if the SHA-256 of its current content is this (lowercase hex, as fs_write and fs_edit return it); the call fails digest_mismatch otherwise.",
		"pattern":     "^[a-f0-9]{64}$",
	}
	sizeProp       = schema{"type": "integer", "minimum": 0, "maximum": 1<<53 - 1}
	modifiedAtProp = schema{"type": "string", "description": "UTC RFC 3339 time.",
		"pattern": `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?Z$`}
	entryTypeProp = schema{"enum": []any{"file", "directory"}}
	digestOut     = schema{"type": "string", "description": "Lowercase hex SHA-256 of the file's content after the call.", "pattern": "^[a-f0-9]{64}$"}
)

func intProp(desc string, lo, hi int64) schema {
	return schema{"type": "integer", "description": desc, "minimum": lo, "maximum": hi}
}

// fsTool returns the MCP tool of a granted fs operation: its name, a description, and the
// input and output schemas of the tool-adapter protocol's payload and result for it, with the
// bounds the grant's limits put on content. Unknown operations have no tool.
func fsTool(op string, l tooladapter.Limits) *sdk.Tool {
	// Content sent must fit one request frame; a little room is left for the frame around
	// it. Content asked for is bounded by the protocol alone (maxBytes 1–4 MiB, which the
	// daemon checks): an adapter cuts a read's answer to fit its response frame and says so
	// with eof false (docs/tool-adapters.md, fs.read windows), so a larger maxBytes is no
	// error, and the schema says what the daemon accepts, not the smaller part it answers
	// (TestReadMaxBytesIsTheDaemons).
	maxContent := min(int64(tooladapter.MaxContentBytes), max(l.MaxRequestBytes-1024, 1))
	maxRead := min(int64(tooladapter.MaxContentBytes), max(l.MaxResponseBytes-1024, 1))
	readOnly := &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)}
	var (
		desc    string
		in, out schema
		ann     = readOnly
	)
	switch op {
	case tooladapter.OpList:
		desc = "List the entries (files and directories only) of a directory in the granted directory."
		in = closedObject([]string{"path"}, schema{
			"path":       pathProp,
			"maxEntries": intProp("At most this many entries.", 1, tooladapter.MaxListEntries),
		})
		out = closedObject([]string{"entries", "truncated"}, schema{
			"entries": schema{"type": "array", "items": closedObject([]string{"name", "type"}, schema{
				"name": schema{"type": "string"}, "type": entryTypeProp, "size": sizeProp, "modifiedAt": modifiedAtProp,
			})},
			"truncated": schema{"type": "boolean"},
		})
	case tooladapter.OpStat:
		desc = "Describe one file or directory in the granted directory: type, size and modification time."
		in = closedObject([]string{"path"}, schema{"path": pathProp})
		out = closedObject([]string{"type", "size"}, schema{"type": entryTypeProp, "size": sizeProp, "modifiedAt": modifiedAtProp})
	case tooladapter.OpRead:
		desc = "Read a UTF-8 text file in the granted directory, or a byte range of it (cut back to a character boundary)."
		in = closedObject([]string{"path"}, schema{
			"path":     pathProp,
			"offset":   intProp("Byte offset to start at (default 0): the first byte of a character, as offset + bytesRead of an earlier read is; one inside a multi-byte character fails invalid_argument.", 0, 1<<53-1),
			"maxBytes": intProp(fmt.Sprintf("At most this many bytes. One answer holds at most about %d: when it is cut, eof is false and fs_read from offset + bytesRead reads on.", maxRead), 1, tooladapter.MaxContentBytes),
		})
		out = closedObject([]string{"content", "bytesRead", "eof"}, schema{
			"content":   schema{"type": "string"},
			"bytesRead": schema{"type": "integer", "minimum": 0},
			"eof":       schema{"type": "boolean"},
		})
	case tooladapter.OpSearch:
		desc = "Search the files under a directory of the granted directory for a literal string; returns matching lines."
		in = closedObject([]string{"path", "query"}, schema{
			"path":       pathProp,
			"query":      schema{"type": "string", "minLength": 1, "maxLength": tooladapter.MaxQueryLen},
			"maxResults": intProp("At most this many matches.", 1, tooladapter.MaxSearchResults),
		})
		out = closedObject([]string{"matches", "truncated"}, schema{
			"matches": schema{"type": "array", "items": closedObject([]string{"path", "line", "column", "text"}, schema{
				"path": schema{"type": "string"}, "line": schema{"type": "integer", "minimum": 1},
				"column": schema{"type": "integer", "minimum": 1}, "text": schema{"type": "string"},
			})},
			"truncated": schema{"type": "boolean"},
		})
	case tooladapter.OpWrite:
		desc = "Write a whole UTF-8 text file in the granted directory: one that does not exist is created (unless create is false), one that exists is replaced only with overwrite true."
		in = closedObject([]string{"path", "content"}, schema{
			"path":           pathProp,
			"content":        schema{"type": "string", "maxLength": maxContent},
			"create":         schema{"type": "boolean", "description": "Allow creating the file (default true: set false to fail not_found rather than create a file that does not exist)."},
			"overwrite":      schema{"type": "boolean", "description": "Allow replacing an existing file (default false: an existing file fails file_exists)."},
			"expectedDigest": digestProp,
		})
		out = closedObject([]string{"created", "bytesWritten", "digest"}, schema{
			"created": schema{"type": "boolean"}, "bytesWritten": schema{"type": "integer", "minimum": 0}, "digest": digestOut,
		})
		ann = &sdk.ToolAnnotations{DestructiveHint: new(true), IdempotentHint: false, OpenWorldHint: new(false)}
	case tooladapter.OpEdit:
		desc = "Replace exact text in a file of the granted directory; each oldText must occur exactly once."
		in = closedObject([]string{"path", "edits"}, schema{
			"path": pathProp,
			"edits": schema{
				"type": "array", "minItems": 1, "maxItems": tooladapter.MaxEdits,
				"items": closedObject([]string{"oldText", "newText"}, schema{
					"oldText": schema{"type": "string", "minLength": 1, "maxLength": maxContent},
					"newText": schema{"type": "string", "maxLength": maxContent},
				}),
			},
			"expectedDigest": digestProp,
		})
		out = closedObject([]string{"replacements", "digest"}, schema{
			"replacements": schema{"type": "integer", "minimum": 0}, "digest": digestOut,
		})
		ann = &sdk.ToolAnnotations{DestructiveHint: new(true), IdempotentHint: false, OpenWorldHint: new(false)}
	default:
		return nil
	}
	return &sdk.Tool{Name: fsToolName(op), Title: op, Description: desc, InputSchema: in, OutputSchema: out, Annotations: ann}
}

// capabilityResultSchema is the output schema of every capability tool: an adapter's bounded
// semantic result, always an object (a bare value comes wrapped as {"state"} or {"value"}).
var capabilityResultSchema = schema{"type": "object", "description": "The capability's bounded semantic result."}

// capabilityTools returns the tools of one capability descriptor: observe (when it has one) and
// one tool per action, each input the action's closed object of primitives. base is the tool
// name prefix chosen for the capability id (see capabilityBases).
func capabilityTools(d capadapter.Descriptor, base string) []toolSpec {
	var out []toolSpec
	fp := func(parts ...string) string { return strings.Join(parts, "\x00") }
	canon, _ := json.Marshal(d) // a validated descriptor always encodes
	if d.Observe {
		t := &sdk.Tool{
			Name:         base + "_observe",
			Title:        "Observe " + d.Title,
			Description:  fmt.Sprintf("Observe %s (capability %s, version %s): its current state.", d.Title, d.CapabilityID, d.Version),
			InputSchema:  closedObject(nil, schema{}),
			OutputSchema: capabilityResultSchema,
			Annotations:  &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(true)},
		}
		out = append(out, toolSpec{tool: t, kind: kindObserve, capabilityID: d.CapabilityID, fingerprint: fp("observe", t.Name, string(canon))})
	}
	for _, a := range d.Actions {
		props := schema{}
		for name, typ := range a.Input.Properties {
			props[name] = schema{"type": typ}
		}
		t := &sdk.Tool{
			Name:         base + "_" + a.Name,
			Title:        a.Title + " (" + d.Title + ")",
			Description:  fmt.Sprintf("%s: action %s of %s (capability %s, version %s).", a.Title, a.Name, d.Title, d.CapabilityID, d.Version),
			InputSchema:  closedObject(append([]string(nil), a.Input.Required...), props),
			OutputSchema: capabilityResultSchema,
			Annotations:  &sdk.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(true)},
		}
		out = append(out, toolSpec{tool: t, kind: kindAction, capabilityID: d.CapabilityID, action: a.Name, fingerprint: fp("action", t.Name, string(canon))})
	}
	return out
}

// capabilityBases maps each capability id to the prefix of its tool names. A capability id may
// hold '.' and ':' (^[a-z0-9][a-z0-9._:-]{0,63}$); both become '_'. When two ids of the set
// map to the same prefix, or a prefix would meet an fs, composed or room tool's name, every one involved gets
// "_" and 8 hex digits of the SHA-256 of its id appended, so that the names stay stable and
// distinct whatever else is listed.
func capabilityBases(ids []string) map[string]string {
	plain := func(id string) string {
		return strings.NewReplacer(".", "_", ":", "_").Replace(id)
	}
	count := map[string]int{}
	for _, id := range ids {
		count[plain(id)]++
	}
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		b := plain(id)
		// "fs" and "room" begin the names of the fs, composed and room tools.
		if count[b] > 1 || b == "fs" || strings.HasPrefix(b, "fs_") || b == "room" || strings.HasPrefix(b, "room_") {
			sum := sha256.Sum256([]byte(id))
			b += "_" + hex.EncodeToString(sum[:4])
		}
		out[id] = b
	}
	return out
}

// sortedNames returns the tool names of specs, sorted.
func sortedNames(specs map[string]toolSpec) []string {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// roomTools returns the tools of the capabilities published into room roomID: observe and
// one tool per published action, named as an agent session's model sees them
// (room.ToolName), each call a room call of this host that the provider authorizes.
func roomTools(roomID string, caps []protocol.RoomCapability) []toolSpec {
	count := map[string]int{}
	for _, c := range caps {
		count[c.CapabilityID]++
	}
	var out []toolSpec
	for _, c := range caps {
		ambiguous := count[c.CapabilityID] > 1
		where := "in room " + roomID
		if !c.ProviderSelf && len(c.Provider) >= 12 {
			where += ", provided by host " + c.Provider[:12]
		}
		title := c.Title
		if title == "" {
			title = c.CapabilityID
		}
		// Availability comes and goes with the provider's presence: the tool stays (a call
		// fails unavailable meanwhile) and the list does not change with it.
		fixed := c
		fixed.Available, fixed.UnavailableReason = false, ""
		canon, _ := json.Marshal(fixed) // decoded from JSON, it encodes
		fp := func(name string) string { return strings.Join([]string{"room", name, roomID, string(canon)}, "\x00") }
		provider := room.HostID(c.Provider)
		if c.Observe {
			t := &sdk.Tool{
				Name:         room.ToolName(c.CapabilityID, provider, "observe", ambiguous),
				Title:        "Observe " + title,
				Description:  fmt.Sprintf("Observe %s (capability %s %s): its current state.", title, c.CapabilityID, where),
				InputSchema:  closedObject(nil, schema{}),
				OutputSchema: capabilityResultSchema,
				Annotations:  &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(true)},
			}
			out = append(out, toolSpec{tool: t, kind: kindRoomObserve, room: roomID, provider: c.Provider,
				capabilityID: c.CapabilityID, fingerprint: fp(t.Name)})
		}
		for _, a := range c.Actions {
			var input capadapter.Input // the provider's descriptor, checked when it published
			_ = json.Unmarshal(a.Input, &input)
			props := schema{}
			for name, typ := range input.Properties {
				props[name] = schema{"type": typ}
			}
			desc := fmt.Sprintf("%s: action %s of %s (capability %s %s).", a.Title, a.Name, title, c.CapabilityID, where)
			if a.ApproveEach {
				desc += " Each call waits for the provider's operator to approve it."
			}
			t := &sdk.Tool{
				Name:         room.ToolName(c.CapabilityID, provider, a.Name, ambiguous),
				Title:        a.Title + " (" + title + ")",
				Description:  desc,
				InputSchema:  closedObject(append([]string(nil), input.Required...), props),
				OutputSchema: capabilityResultSchema,
				Annotations:  &sdk.ToolAnnotations{DestructiveHint: new(true), OpenWorldHint: new(true)},
			}
			out = append(out, toolSpec{tool: t, kind: kindRoomAction, room: roomID, provider: c.Provider,
				capabilityID: c.CapabilityID, action: a.Name, fingerprint: fp(t.Name)})
		}
	}
	return out
}

// sessionRules parses the session's policy as its record holds it; nil when it has none (or
// one this bridge cannot read, whose calls the daemon denies).
func sessionRules(raw json.RawMessage) *policy.Policy {
	if len(raw) == 0 {
		return nil
	}
	p, err := policy.Parse(raw)
	if err != nil {
		return nil
	}
	return p
}

// policyNote is what an fs tool's description says of the session's policy for op, so that
// a model knows before it calls that a write will wait or is denied. Empty without a policy.
func policyNote(p *policy.Policy, op string) string {
	return policyNoteOn(p, op, "")
}

// policyNoteOn is policyNote of op for a tool that is not op's own: about names op as that
// tool has it ("fs.list, which this tool calls"), "" for op's own tool.
func policyNoteOn(p *policy.Policy, op, about string) string {
	if p == nil {
		return ""
	}
	name := ""
	if p.Name() != "" {
		name = " (" + p.Name() + ")"
	}
	subject, byPath := "this operation", "by path"
	if about != "" {
		subject, byPath = about, about+", by path"
	}
	switch sum := p.Summary(op); sum {
	case string(policy.Allow):
		return ""
	case string(policy.Deny):
		return " The session's policy" + name + " denies " + subject + ": every call is refused policy_denied."
	case string(policy.Ask):
		return " The session's policy" + name + " asks the operator before " + subject + ": " + askNote
	default:
		var globs []string
		for i, r := range p.Document().Rules {
			if !slices.Contains(r.Operations, op) && !slices.Contains(r.Operations, "fs.*") {
				continue
			}
			where := "any path"
			if len(r.Paths) > 0 {
				where = strings.Join(r.Paths, ", ")
			}
			globs = append(globs, fmt.Sprintf("%d. %s: %s", i+1, where, r.Decision))
			if len(globs) == maxNoteRules {
				globs = append(globs, "…")
				break
			}
		}
		return fmt.Sprintf(" The session's policy%s decides %s (%s): first match of %s; otherwise %s. A denied call is refused policy_denied; "+askNote,
			name, byPath, sum, strings.Join(globs, "; "), p.Document().Default)
	}
}

// askNote tells a model what a call under an ask rule does: it waits for the operator.
const askNote = "a call that asks waits for the operator's decision and runs once approved; " +
	"a denial is refused approval_denied, no decision in time approval_timeout (do not repeat such a call: tell the user what you meant to do)."

// maxNoteRules bounds the rules a tool description lists.
const maxNoteRules = 8
