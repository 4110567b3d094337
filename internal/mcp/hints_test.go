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
// what it must be), and the adapter's own invalid_args (generic hint, no adapter text).
func TestErrorsCarryAHint(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("one\ntwo\n"), 0o600)
	os.WriteFile(filepath.Join(e.root, "blob.bin"), []byte{0xff, 0xfe, 0x00, 0x80}, 0o600)
	os.Mkdir(filepath.Join(e.root, "dir"), 0o700)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.list,fs.read,fs.write,fs.edit"))
	e.registerLamp(t)
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"desk_lamp"}})

	cases := []struct {
		name, tool string
		args       map[string]any
		code       string
		says       []string // the message names these
	}{
		{"file_exists", "fs_write", map[string]any{"path": "notes.txt", "content": "x", "create": true}, "file_exists", nil},
		{"edit_not_found", "fs_edit", map[string]any{"path": "notes.txt", "edits": []any{map[string]any{"oldText": "three", "newText": "3"}}}, "edit_not_found", nil},
		{"not_utf8", "fs_read", map[string]any{"path": "blob.bin"}, "not_utf8", nil},
		{"not_a_file", "fs_read", map[string]any{"path": "dir"}, "not_a_file", nil},
		{"runtime: fs argument out of range", "fs_list", map[string]any{"path": ".", "maxEntries": 0}, "adapter_request_invalid",
			[]string{"maxEntries", "an integer from 1 to 10000"}},
		{"runtime: fs argument of the wrong type", "fs_read", map[string]any{"path": "notes.txt", "maxBytes": "dazzling"}, "adapter_request_invalid",
			[]string{"payload member maxBytes must be an integer from 1 to 4194304"}},
		{"runtime: fs edits of the wrong type", "fs_edit", map[string]any{"path": "notes.txt", "edits": "dazzling"}, "adapter_request_invalid",
			[]string{"payload member edits must be an array of 1 to 256 edits"}},
		{"runtime: capability argument of the wrong type", "desk_lamp_set_brightness", map[string]any{"level": "dazzling"}, "invalid_args",
			[]string{`argument "level" must be a number`}},
		{"runtime: undeclared capability argument", "desk_lamp_set_power", map[string]any{"on": true, "colour": "red"}, "invalid_args",
			[]string{`which takes "on" (true or false, required)`}},
		{"the adapter's own invalid_args", "desk_lamp_set_brightness", map[string]any{"level": 150}, "invalid_args",
			[]string{"reported by the adapter"}},
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
			for _, s := range tc.says {
				if !strings.Contains(lines[0], s) {
					t.Errorf("%s: %q does not name %q", tc.tool, lines[0], s)
				}
			}
			if strings.Contains(text(r), "dazzling") || strings.Contains(text(r), "colour") {
				t.Errorf("the error quotes what the call sent: %q", text(r))
			}
		})
	}
}
