package turn

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// toolName maps a tool operation to the name the model sees: the Chat Completions API allows
// only [A-Za-z0-9_-] in function names, so "fs.read" is offered as "fs_read".
func toolName(op string) string { return strings.ReplaceAll(op, ".", "_") }

// operationOf maps a model's tool name back to a granted operation, or "".
func operationOf(name string, ops []string) string {
	for _, op := range ops {
		if toolName(op) == name {
			return op
		}
	}
	return ""
}

// Definitions returns the model tools of exactly the granted operations, in the descriptor's
// order, each with a closed JSON Schema whose bounds come from the descriptor's limits and the
// adapter protocol's maxima. No operations, no tools.
func Definitions(ops []string, limits tooladapter.Limits) []model.Tool {
	var tools []model.Tool
	for _, op := range ops {
		desc, params := definition(op, limits)
		if params == nil {
			continue
		}
		b, err := json.Marshal(params)
		if err != nil {
			panic("turn: tool schema not serializable: " + err.Error())
		}
		tools = append(tools, model.Tool{Name: toolName(op), Description: desc, Parameters: b})
	}
	return tools
}

type schema = map[string]any

func object(required []string, props schema) schema {
	return schema{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

var pathProp = schema{
	"type":        "string",
	"description": `A path relative to the session's working directory: "." is the directory itself; no leading "/", no ".." segments.`,
	"minLength":   1,
	"maxLength":   4096,
}

func intProp(desc string, min, max int64) schema {
	return schema{"type": "integer", "description": desc, "minimum": min, "maximum": max}
}

// digestProp is the wire's expectedDigest: bare lowercase hex, as fs_write and fs_edit return
// it (tooladapter's validDigest). It once said "sha256:" and a hex digest, which the runtime
// refuses, so a model that followed it could never make a guarded write.
var digestProp = schema{
	"type":        "string",
	"description": "Only change the file if the SHA-256 of its current content is this (64 lowercase hex digits, as fs_write and fs_edit return it); the call fails digest_mismatch otherwise.",
	"pattern":     "^[a-f0-9]{64}$",
}

func definition(op string, l tooladapter.Limits) (string, schema) {
	// Content the model sends must fit in one request frame, and content it asks for in one
	// response frame; a little room is left for the envelope.
	maxContent := min(int64(tooladapter.MaxContentBytes), max(l.MaxRequestBytes-1024, 1))
	maxRead := min(int64(tooladapter.MaxContentBytes), max(l.MaxResponseBytes-1024, 1))
	switch op {
	case tooladapter.OpList:
		return "List the entries of a directory.", object([]string{"path"}, schema{
			"path":       pathProp,
			"maxEntries": intProp("At most this many entries.", 1, tooladapter.MaxListEntries),
		})
	case tooladapter.OpStat:
		return "Describe one file or directory: type, size and modification time.", object([]string{"path"}, schema{
			"path": pathProp,
		})
	case tooladapter.OpRead:
		return "Read a UTF-8 text file, or a byte range of it.", object([]string{"path"}, schema{
			"path":     pathProp,
			"offset":   intProp("Byte offset to start at (default 0): the first byte of a character, as offset + bytesRead of an earlier read is; one inside a multi-byte character fails invalid_argument.", 0, 1<<53-1),
			"maxBytes": intProp("At most this many bytes.", 1, maxRead),
		})
	case tooladapter.OpSearch:
		return "Search files under a directory for a literal string; returns matching lines.", object([]string{"path", "query"}, schema{
			"path":       pathProp,
			"query":      schema{"type": "string", "minLength": 1, "maxLength": tooladapter.MaxQueryLen},
			"maxResults": intProp("At most this many matches.", 1, tooladapter.MaxSearchResults),
		})
	case tooladapter.OpWrite:
		return "Write a whole UTF-8 text file: one that does not exist is created (unless create is false), one that exists is replaced only with overwrite true.", object([]string{"path", "content"}, schema{
			"path":           pathProp,
			"content":        schema{"type": "string", "maxLength": maxContent},
			"create":         schema{"type": "boolean", "description": "Allow creating the file (default true: set false to fail not_found rather than create a file that does not exist)."},
			"overwrite":      schema{"type": "boolean", "description": "Allow replacing an existing file (default false: an existing file fails file_exists)."},
			"expectedDigest": digestProp,
		})
	case tooladapter.OpEdit:
		return "Replace exact text in a file; each oldText must occur exactly once.", object([]string{"path", "edits"}, schema{
			"path": pathProp,
			"edits": schema{
				"type": "array", "minItems": 1, "maxItems": tooladapter.MaxEdits,
				"items": object([]string{"oldText", "newText"}, schema{
					"oldText": schema{"type": "string", "minLength": 1, "maxLength": maxContent},
					"newText": schema{"type": "string", "maxLength": maxContent},
				}),
			},
			"expectedDigest": digestProp,
		})
	}
	return "", nil
}

// boundOutput cuts a tool's output to at most limit bytes, on a rune boundary, and says so in
// words the model cannot mistake for file content.
func boundOutput(out string, limit int) (string, bool) {
	if len(out) <= limit {
		return out, false
	}
	cut := limit
	for cut > 0 && cut < len(out) && !runeStart(out[cut]) {
		cut--
	}
	return out[:cut] + fmt.Sprintf("\n[airlock: tool output truncated: %d of %d bytes shown]", cut, len(out)), true
}

func runeStart(b byte) bool { return b&0xC0 != 0x80 }
