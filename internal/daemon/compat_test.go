package daemon_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
)

// compatStep is one command line sent to the real daemon and the error code it must get ("" for
// success). The steps of a table run in order on one connection, so that a step may rely on a
// session an earlier one opened.
type compatStep struct {
	name string
	line string
	code string
}

// TestPiDaemonCompat sends a real airlockd, member by member, commands shaped as Pi Daemon's
// parser reads them (docs/protocol.md, "Compatibility with Pi Daemon clients"; the facts of
// reference/pi-daemon-facts.md §2–§4): each command Pi Daemon accepts is accepted, each one it
// refuses is refused with Pi Daemon's code, in 1.x and 2.x. Where airlock differs on purpose the
// row says so. schemas/schemas_test.go's piCompatCases hold the same rules against the schemas.
func TestPiDaemonCompat(t *testing.T) {
	llm := startModel(t)
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--provider", "local=" + llm.URL()}})
	host := hostID(t, d.Dial())
	socketDir := daemontest.ShortDir(t)
	cwd := t.TempDir()
	cwdJSON, _ := json.Marshal(cwd)
	none := `"extensions":"none","skills":"none","promptTemplates":"none","themes":"none","contextFiles":"none"`

	for _, v := range []string{"1.0", "2.0"} {
		t.Run(v, func(t *testing.T) {
			n := 0
			cmd := func(version, op, identity, payload string) string {
				n++
				s := `{"protocolVersion":"` + version + `","requestId":"r` + strconv.Itoa(n) + `","operation":"` + op + `"`
				if identity != "" {
					s += "," + identity
				}
				return s + `,"payload":` + payload + "}"
			}
			sid := "pi-" + v
			id := func(g int) string { return `"sessionId":"` + sid + `","generation":` + strconv.Itoa(g) }
			keyed := func(g int, key string) string { return id(g) + `,"idempotencyKey":"` + key + `"` }
			open := func(over string) string {
				return `{"cwd":` + string(cwdJSON) + `,"session":{"mode":"new"},"resources":{` + none + `,"tools":"none"` + over + `}}`
			}
			tools := func(t string) string {
				return `{"cwd":` + string(cwdJSON) + `,"session":{"mode":"new"},"resources":{` + none + `,"tools":` + t + `}}`
			}
			desc := descriptor(socketDir+"/none.sock", host, sid, 9, newHandle(t), "fs.read")
			desc["bearer"] = "smuggled"
			smuggled, _ := json.Marshal(desc)
			v2 := v == "2.0"
			ifV2 := func(a, b string) string {
				if v2 {
					return a
				}
				return b
			}

			steps := []compatStep{
				// §2.2 the envelope.
				{"minor with leading zeros", cmd(v[:2]+"007", "handshake", "", `{}`), ""},
				{"version not of the form", cmd("1.x", "handshake", "", `{}`), "invalid_protocol_version"},
				{"version not a string", strings.Replace(cmd(v, "handshake", "", `{}`), `"`+v+`"`, `2`, 1), "invalid_field"},
				{"requestId of 128", strings.Replace(cmd(v, "handshake", "", `{}`), `"requestId":"r`, `"requestId":"`+strings.Repeat("q", 120), 1), ""},
				{"requestId of 129", strings.Replace(cmd(v, "handshake", "", `{}`), `"requestId":"r`, `"requestId":"`+strings.Repeat("q", 129), 1), "invalid_field"},
				{"unknown operation", cmd(v, "explode", "", `{}`), "unknown_operation"},
				{"unknown envelope member", strings.Replace(cmd(v, "handshake", "", `{}`), `"payload"`, `"trace":{"id":[1]},"payload"`, 1), ""},
				{"payload missing", `{"protocolVersion":"` + v + `","requestId":"np","operation":"handshake"}`, "invalid_field"},
				{"duplicate member", strings.Replace(cmd(v, "handshake", "", `{}`), `"payload"`, `"operation":"status","payload"`, 1), "invalid_field"},
				{"case-variant member", strings.Replace(cmd(v, "handshake", "", `{}`), `"payload"`, `"Payload":{},"payload"`, 1), "invalid_field"},
				{"handshake ignores identity members", cmd(v, "handshake", `"sessionId":7,"generation":"x","idempotencyKey":null`, `{}`), ""},
				{"status ignores a generation without sessionId", cmd(v, "status", `"generation":"x"`, `{}`), ""},
				{"sessionId of 257", cmd(v, "status", `"sessionId":"`+strings.Repeat("s", 257)+`"`, `{}`), "invalid_field"},
				{"open without generation", cmd(v, "open", `"sessionId":"`+sid+`"`, open("")), "invalid_field"},
				{"generation 1.5", cmd(v, "open", `"sessionId":"`+sid+`","generation":1.5`, open("")), "invalid_field"},
				{"generation -1", cmd(v, "open", `"sessionId":"`+sid+`","generation":-1`, open("")), "invalid_field"},

				// §2.3 open, member by member.
				{"open as Pi's own v1 example: model and systemPrompt", cmd(v, "open", `"sessionId":"`+sid+`","generation":1.0,"idempotencyKey":"ignored"`,
					`{"cwd":`+string(cwdJSON)+`,"name":"agent-a","session":{"mode":"new"},"model":{"provider":"local","id":"m","thinkingLevel":"low"},`+
						`"resources":{`+none+`,"tools":"none","systemPrompt":"Be concise."}}`), ""},
				{"same generation, other policy", cmd(v, "open", id(1), open("")), "session_policy_conflict"},
				{"open without resources", cmd(v, "open", id(2), `{"cwd":`+string(cwdJSON)+`,"session":{"mode":"new"}}`), ""},
				{"stale generation", cmd(v, "open", id(1), open("")), "stale_generation"},
				{"unknown members at every open level", cmd(v, "open", id(3), `{"cwd":`+string(cwdJSON)+`,"future":{"a":1},`+
					`"session":{"mode":"new","fork":true,"path":"ignored"},"model":{"provider":"local","id":"m","temperature":0.2},`+
					`"resources":{`+none+`,"tools":"none","agents":"all","systemPrompt":""}}`), ""},
				{"case-variant session member", cmd(v, "open", id(4), `{"cwd":`+string(cwdJSON)+`,"session":{"mode":"new","Mode":"x"}}`), "invalid_field"},
				{"cwd missing", cmd(v, "open", id(4), `{"session":{"mode":"new"}}`), "invalid_field"},
				{"mode fork", cmd(v, "open", id(4), `{"cwd":`+string(cwdJSON)+`,"session":{"mode":"fork"}}`), "invalid_field"},
				{"mode open without path", cmd(v, "open", id(4), `{"cwd":`+string(cwdJSON)+`,"session":{"mode":"open"}}`), "invalid_field"},
				{"thinkingLevel ultra", cmd(v, "open", id(4), `{"cwd":`+string(cwdJSON)+`,"session":{"mode":"new"},"model":{"provider":"local","id":"m","thinkingLevel":"ultra"}}`), "invalid_field"},
				{"model without id", cmd(v, "open", id(4), `{"cwd":`+string(cwdJSON)+`,"session":{"mode":"new"},"model":{"provider":"local"}}`), "invalid_field"},
				{"skills all", cmd(v, "open", id(4), strings.Replace(open(""), `"skills":"none"`, `"skills":"all"`, 1)), "unsupported_resource_policy"},
				{"skills not a string", cmd(v, "open", id(4), strings.Replace(open(""), `"skills":"none"`, `"skills":["none"]`, 1)), "invalid_field"},
				{"themes missing", cmd(v, "open", id(4), strings.Replace(open(""), `"themes":"none",`, ``, 1)), "invalid_field"},
				{"systemPrompt over the limit", cmd(v, "open", id(4), open(`,"systemPrompt":"`+strings.Repeat("x", 262145)+`"`)), "invalid_field"},
				{"systemPrompt not a string", cmd(v, "open", id(4), open(`,"systemPrompt":1`)), "invalid_field"},
				{"tools as a host-adapter string", cmd(v, "open", id(4), tools(`"host-adapter"`)), ifV2("invalid_field", "unsupported_resource_policy")},
				{"empty descriptor", cmd(v, "open", id(4), tools(`{"mode":"host-adapter","descriptor":{}}`)), ifV2("unsupported_tool_adapter_version", "invalid_field")},
				{"tools mode builtin", cmd(v, "open", id(4), tools(`{"mode":"builtin","descriptor":{}}`)), ifV2("unsupported_resource_policy", "invalid_field")},
				{"smuggled member in the tools policy", cmd(v, "open", id(4), tools(`{"mode":"host-adapter","descriptor":{},"token":"t"}`)), ifV2("invalid_tool_adapter_descriptor", "invalid_field")},
				{"smuggled member in the descriptor", cmd(v, "open", `"sessionId":"`+sid+`","generation":9`, tools(`{"mode":"host-adapter","descriptor":`+string(smuggled)+`}`)), ifV2("invalid_tool_adapter_field", "invalid_field")},

				// §2.3 the other operations; §4 the controls of a session without a running turn.
				{"status with unknown payload member", cmd(v, "status", `"sessionId":"`+sid+`"`, `{"verbose":true}`), ""},
				{"attach with unknown payload member", cmd(v, "attach", id(3), `{"replay":true}`), ""},
				{"detach", cmd(v, "detach", id(3), `{}`), ""},
				{"attach without generation", cmd(v, "attach", `"sessionId":"`+sid+`"`, `{}`), "invalid_field"},
				{"wake without idempotencyKey", cmd(v, "wake", id(3), `{"prompt":"p"}`), "invalid_field"},
				{"wake empty prompt", cmd(v, "wake", keyed(3, "k0"), `{"prompt":""}`), "invalid_field"},
				{"wake prompt over the limit", cmd(v, "wake", keyed(3, "k0"), `{"prompt":"`+strings.Repeat("p", 262145)+`"}`), "invalid_field"},
				{"wake source of 129", cmd(v, "wake", keyed(3, "k0"), `{"prompt":"p","source":"`+strings.Repeat("s", 129)+`"}`), "invalid_field"},
				{"wake waitForTerminal a string", cmd(v, "wake", keyed(3, "k0"), `{"prompt":"p","waitForTerminal":"no"}`), "invalid_field"},
				{"steer with an unknown member, no turn running", cmd(v, "steer", keyed(3, "s1"), `{"message":"m","x":1}`), "session_not_running"},
				{"followUp without message", cmd(v, "followUp", keyed(3, "f1"), `{}`), "invalid_field"},
				{"abort with unknown payload member", cmd(v, "abort", id(3), `{"reason":"x"}`), ""},
				{"close retainSession a string", cmd(v, "close", id(3), `{"retainSession":"no"}`), "invalid_field"},
				{"close with unknown member", cmd(v, "close", id(3), `{"retainSession":false,"why":"done"}`), ""},
				{"status of a closed session", cmd(v, "status", `"sessionId":"`+sid+`"`, `{}`), "session_not_found"},
				{"drain timeoutMs 0.5", cmd(v, "drain", "", `{"timeoutMs":0.5}`), "invalid_field"},
				{"drain timeoutMs over a day", cmd(v, "drain", "", `{"timeoutMs":86400001}`), "invalid_field"},
			}
			rc := dialRawT(t, d.Socket)
			for _, s := range steps {
				rc.send(s.line)
				resp := rc.next()
				if got := errCodeOf(resp); got != s.code {
					t.Errorf("%s: code %q, want %q: %.300v", s.name, got, s.code, resp["error"])
				}
			}
			// A handshake's response carries no sessionId it ignored.
			rc.send(cmd(v, "handshake", `"sessionId":"x"`, `{}`))
			if resp := rc.next(); resp["sessionId"] != nil {
				t.Errorf("handshake echoes an ignored sessionId: %v", resp["sessionId"])
			}
		})
	}

	// Last, as it stops admission: drain with a timeout written as Pi Daemon's JSON may write it.
	rc := dialRawT(t, d.Socket)
	rc.send(`{"protocolVersion":"1.0","requestId":"dr","operation":"drain","payload":{"timeoutMs":1e3,"force":true}}`)
	if resp := rc.next(); errCodeOf(resp) != "" || data(resp)["timeoutMs"] != 1000.0 {
		t.Errorf("drain: %v", resp)
	}
}

// TestPiDaemonV1SystemPromptReachesTheModel: a 1.x open as Pi Daemon's own example writes it,
// with resources.systemPrompt, puts that prompt first in every model request of the session's
// turns, as a 2.x one does; an empty prompt sends no system message, as an absent one.
func TestPiDaemonV1SystemPromptReachesTheModel(t *testing.T) {
	llm := startModel(t)
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--provider", "local=" + llm.URL()}})
	cwd := t.TempDir()
	for _, tc := range []struct {
		version, prompt string
		resources       bool
	}{
		{"1.0", "Be concise.", true},
		{"2.0", "Be concise.", true},
		{"1.0", "", true},
		{"1.0", "", false},
	} {
		name := tc.version + "/" + strconv.Quote(tc.prompt) + "/resources=" + strconv.FormatBool(tc.resources)
		t.Run(name, func(t *testing.T) {
			c := d.Dial()
			c.SetVersion(tc.version)
			p := modelOpen(cwd)
			if tc.resources {
				p["resources"].(map[string]any)["systemPrompt"] = tc.prompt
			} else {
				delete(p, "resources")
			}
			sid := "sp-" + strings.NewReplacer("/", "-", `"`, "", "=", "-").Replace(name)
			if r := call(t, c, client.Command{Operation: "open", SessionID: sid, Generation: gen(1), Payload: p}); !r.OK {
				t.Fatalf("open: %v", r.Err())
			}
			before := llm.Count()
			llm.Push(modeltest.Reply{Text: "ok"})
			r := call(t, c, client.Command{Operation: "wake", SessionID: sid, Generation: gen(1), IdempotencyKey: "k",
				Payload: map[string]any{"prompt": "hello", "priority": "high"}}) // an unknown member, ignored
			if !r.OK {
				t.Fatalf("wake: %v", r.Err())
			}
			reqs := llm.Requests()
			if len(reqs) != before+1 {
				t.Fatalf("%d model requests, want %d", len(reqs), before+1)
			}
			msgs := reqs[before].Request.Messages
			var roles []model.Role
			for _, m := range msgs {
				roles = append(roles, m.Role)
			}
			if tc.prompt != "" {
				if len(msgs) != 2 || msgs[0].Role != model.RoleSystem || msgs[0].Content != tc.prompt || msgs[1].Content != "hello" {
					t.Fatalf("messages %v, want the system prompt, then the prompt", roles)
				}
			} else if len(msgs) != 1 || msgs[0].Role != model.RoleUser {
				t.Fatalf("messages %v, want the prompt alone", roles)
			}
		})
	}
}
