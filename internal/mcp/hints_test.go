package mcp_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/hint"
	"github.com/airlockhq/airlock/internal/mcp"
)

// TestErrorsCarryAHint: through a go-sdk client, a real airlockd, a real airlock-fs and the
// go-lamp example adapter, each failed call's text carries its code and, on the next line, the
// code's hint from internal/hint, which _meta carries too: airlock-fs's refusals (which reach
// the runtime as bare codes), the runtime's own argument checks (which name the argument and
// what it must be: an fs or composed tool's with the fs tools' hint, a capability action's with
// the capability one; an argument to an observe, which takes none), and the adapter's own
// invalid_args (generic hint, no adapter text).
func TestErrorsCarryAHint(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("one\ntwo\n"), 0o600)
	os.WriteFile(filepath.Join(e.root, "blob.bin"), []byte{0xff, 0xfe, 0x00, 0x80}, 0o600)
	os.Mkdir(filepath.Join(e.root, "dir"), 0o700)
	os.WriteFile(filepath.Join(e.root, "accent.txt"), []byte("café\n"), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.list,fs.read,fs.write,fs.edit"))
	e.registerLamp(t)
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"desk_lamp"}})

	cases := []struct {
		name, tool string
		args       map[string]any
		code       string
		says       []string // the message names these
		hintSays   string   // and the hint this
	}{
		{"file_exists", "fs_write", map[string]any{"path": "notes.txt", "content": "x", "create": true}, "file_exists", nil, ""},
		{"edit_not_found", "fs_edit", map[string]any{"path": "notes.txt", "edits": []any{map[string]any{"oldText": "three", "newText": "3"}}}, "edit_not_found", nil, ""},
		{"not_utf8", "fs_read", map[string]any{"path": "blob.bin"}, "not_utf8", nil, ""},
		{"not_a_file", "fs_read", map[string]any{"path": "dir"}, "not_a_file", nil, ""},
		// The daemon checks every bound of fs.read's payload, so what airlock-fs still
		// refuses invalid_argument is an offset inside a character (or a maxBytes smaller
		// than the character there): the hint said to compare the arguments with the input
		// schema, which they fit.
		{"invalid_argument: an offset inside a character", "fs_read", map[string]any{"path": "accent.txt", "offset": 4}, "invalid_argument",
			nil, "inside a multi-byte character"},
		{"runtime: fs argument out of range", "fs_list", map[string]any{"path": ".", "maxEntries": 0}, "adapter_request_invalid",
			[]string{"maxEntries", "an integer from 1 to 10000"}, "correct that member"},
		{"runtime: fs argument of the wrong type", "fs_read", map[string]any{"path": "notes.txt", "maxBytes": "dazzling"}, "adapter_request_invalid",
			[]string{"payload member maxBytes must be an integer from 1 to 4194304"}, "correct that member"},
		{"runtime: fs edits of the wrong type", "fs_edit", map[string]any{"path": "notes.txt", "edits": "dazzling"}, "adapter_request_invalid",
			[]string{"payload member edits must be an array of 1 to 256 edits"}, "correct that member"},
		// A write whose arguments fit the schema (characters, not bytes) but whose request is
		// longer than the line airlockd reads is refused before it is sent: not a closed
		// daemon connection (daemon_unreachable, whose hint says to call again).
		{"runtime: a write over the daemon's line bound", "fs_write", map[string]any{"path": "big.txt", "content": strings.Repeat("日", 400000)},
			"adapter_request_too_large", []string{"over the 1048576 bytes airlockd reads in one"}, "send less"},
		// A composed tool's own argument has the fs tools' code and hint, which say to correct
		// the member named (not the capability one, which speaks of a device).
		{"runtime: composed argument out of range", "fs_head", map[string]any{"path": "notes.txt", "lines": 0}, "adapter_request_invalid",
			[]string{"argument lines must be an integer from 1 to 100000"}, "correct that member"},
		{"runtime: composed argument of the wrong type", "fs_tree", map[string]any{"path": ".", "maxDepth": "dazzling"}, "adapter_request_invalid",
			[]string{"argument maxDepth must be an integer from 1 to 64"}, "correct that member"},
		{"runtime: composed argument unknown", "fs_list_sorted", map[string]any{"path": ".", "recursive": true}, "adapter_request_invalid",
			[]string{"recursive is not an argument of this tool"}, "correct that member"},
		{"runtime: composed argument not a choice", "fs_list_sorted", map[string]any{"path": ".", "sortBy": "dazzling"}, "adapter_request_invalid",
			[]string{"argument sortBy must be"}, "correct that member"},
		{"runtime: capability argument of the wrong type", "desk_lamp_set_brightness", map[string]any{"level": "dazzling"}, "invalid_args",
			[]string{`airlock: invalid_args: argument "level" must be a number`}, "device"},
		{"runtime: undeclared capability argument", "desk_lamp_set_power", map[string]any{"on": true, "colour": "red"}, "invalid_args",
			[]string{`which takes "on" (true or false, required)`}, "device"},
		// Arguments over the adapter protocol's 1024 bytes: too_large, whose hint says to send
		// less, not the envelope's invalid_field, whose hint says airlock's own client erred.
		{"runtime: capability arguments over 1024 bytes", "desk_lamp_set_brightness", map[string]any{"level": strings.Repeat("dazzling", 140)},
			"too_large", []string{"over the 1024 an action takes"}, "send less"},
		// observe takes no arguments, as its input schema says: one is refused as an
		// action's undeclared one is, not run with it unread.
		{"runtime: an argument to observe", "desk_lamp_observe", map[string]any{"colour": "red"}, "invalid_args",
			[]string{"an argument is not declared by observe, which takes no arguments"}, "device"},
		{"the adapter's own invalid_args", "desk_lamp_set_brightness", map[string]any{"level": 150}, "invalid_args",
			[]string{"reported by the adapter"}, "device"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := cn.call(t, tc.tool, tc.args)
			if !r.IsError {
				t.Fatalf("%s: %s, want %s", tc.tool, text(r), tc.code)
			}
			we := airlockError(t, r)
			h := hint.For(tc.code)
			lines := strings.Split(text(r), "\n")
			if we.Code != tc.code || we.Hint != h || h == hint.Fallback || len(lines) != 2 ||
				!strings.HasPrefix(lines[0], "airlock: "+tc.code+": ") || lines[1] != h {
				t.Fatalf("%s: %+v, text %q; want %s with its hint %q", tc.tool, we, text(r), tc.code, h)
			}
			// The code once, at the start: the message does not repeat it.
			if strings.Count(lines[0], tc.code) != 1 || strings.Contains(lines[0], "capadapter") {
				t.Errorf("%s: %q repeats the code", tc.tool, lines[0])
			}
			for _, s := range tc.says {
				if !strings.Contains(lines[0], s) {
					t.Errorf("%s: %q does not name %q", tc.tool, lines[0], s)
				}
			}
			if !strings.Contains(h, tc.hintSays) || strings.HasPrefix(tc.tool, "fs_") && strings.Contains(h, "device") {
				t.Errorf("%s: the hint %q does not fit the tool", tc.tool, h)
			}
			if strings.Contains(text(r), "dazzling") || strings.Contains(text(r), "colour") {
				t.Errorf("the error quotes what the call sent: %q", text(r))
			}
		})
	}
}
