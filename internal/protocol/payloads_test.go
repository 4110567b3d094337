package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// openBase is a valid v1 open payload. Tests change one member at a time.
func openBase() map[string]any {
	return map[string]any{
		"cwd":     "/work/project",
		"session": map[string]any{"mode": "new"},
		"resources": map[string]any{
			"extensions": "none", "skills": "none", "promptTemplates": "none",
			"themes": "none", "contextFiles": "none", "tools": "none",
		},
	}
}

// deleteMember, as a change's value, removes the member.
type deleteMember struct{}

// change sets (or with deleteMember removes) the member at a dotted path, creating objects on
// the way.
type change struct {
	path  string
	value any
}

func apply(m map[string]any, changes ...change) map[string]any {
	m = deepCopy(m)
	for _, c := range changes {
		parts := strings.Split(c.path, ".")
		cur := m
		for _, p := range parts[:len(parts)-1] {
			next, ok := cur[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				cur[p] = next
			}
			cur = next
		}
		last := parts[len(parts)-1]
		if _, del := c.value.(deleteMember); del {
			delete(cur, last)
		} else {
			cur[last] = c.value
		}
	}
	return m
}

func deepCopy(m map[string]any) map[string]any {
	out := maps.Clone(m)
	for k, v := range out {
		if sub, ok := v.(map[string]any); ok {
			out[k] = deepCopy(sub)
		}
	}
	return out
}

func mustVersion(t *testing.T, s string) Version {
	t.Helper()
	v, ok := ParseVersion(s)
	if !ok {
		t.Fatalf("bad version %q", s)
	}
	return v
}

// validateOpen decodes a payload strictly, as the daemon does, then validates it.
func validateOpen(t *testing.T, version string, payload any) (*Policy, *Error) {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return validateOpenJSON(t, version, b)
}

func validateOpenJSON(t *testing.T, version string, payload []byte) (*Policy, *Error) {
	t.Helper()
	v := mustVersion(t, version)
	var p OpenPayload
	if e := DecodePayload(&Command{Version: v, Operation: OpOpen, Payload: payload}, &p); e != nil {
		return nil, e
	}
	return p.Validate(v)
}

type openCase struct {
	name    string
	version string
	changes []change
	code    string // "" when accepted
	field   string
	reason  string // details.reason, for refusals by the strict decoder
}

func runOpenCases(t *testing.T, tests []openCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol, e := validateOpen(t, tt.version, apply(openBase(), tt.changes...))
			if tt.code == "" {
				if e != nil {
					t.Fatalf("refused: %v %v", e, e.Details)
				}
				if pol == nil || pol.Tools != ResourceNone {
					t.Fatalf("policy %+v", pol)
				}
				return
			}
			if e == nil {
				t.Fatalf("accepted as %+v, want %s", pol, tt.code)
			}
			if pol != nil {
				t.Errorf("a refusal also returned a policy")
			}
			if e.Code != tt.code || e.Details["field"] != tt.field {
				t.Errorf("got %s at %v (%s), want %s at %s", e.Code, e.Details["field"], e.Message, tt.code, tt.field)
			}
			if tt.reason != "" && e.Details["reason"] != tt.reason {
				t.Errorf("reason %v, want %s", e.Details["reason"], tt.reason)
			}
		})
	}
}

func TestOpenPayloadValid(t *testing.T) {
	rich := apply(openBase(),
		change{"name", "agent-a"},
		change{"agentDir", "/agents/a"},
		change{"session", map[string]any{"mode": "open", "path": "/sessions/a/conv.jsonl", "sessionDir": "/sessions/a"}},
		change{"model", map[string]any{"provider": "anthropic", "id": "claude-x", "thinkingLevel": "high"}},
	)
	tests := []struct {
		name    string
		version string
		payload map[string]any
		want    Policy
	}{
		{"minimal v1", "1.0", openBase(), Policy{Cwd: "/work/project", Mode: "new", Tools: "none"}},
		{"minimal v2", "2.0", openBase(), Policy{Cwd: "/work/project", Mode: "new", Tools: "none"}},
		{"v1 with every optional member", "1.0", apply(rich, change{"resources.systemPrompt", "Be concise."}), Policy{
			Cwd: "/work/project", Name: "agent-a", AgentDir: "/agents/a", Mode: "open", Path: "/sessions/a/conv.jsonl",
			Model: &ModelRef{Provider: "anthropic", ID: "claude-x", ThinkingLevel: "high"}, SystemPrompt: "Be concise.", Tools: "none",
		}},
		{"v2 with every optional member", "2.7", apply(rich, change{"resources.systemPrompt", "Be brief."}), Policy{
			Cwd: "/work/project", Name: "agent-a", AgentDir: "/agents/a", Mode: "open", Path: "/sessions/a/conv.jsonl",
			SessionDir: "/sessions/a", Model: &ModelRef{Provider: "anthropic", ID: "claude-x", ThinkingLevel: "high"},
			SystemPrompt: "Be brief.", Tools: "none",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol, e := validateOpen(t, tt.version, tt.payload)
			if e != nil {
				t.Fatalf("refused: %v %v", e, e.Details)
			}
			if !reflect.DeepEqual(*pol, tt.want) {
				t.Errorf("policy %+v\nwant   %+v", *pol, tt.want)
			}
		})
	}
}

// TestOpenPayloadResources pins Pi Daemon's resource rules, in 1.x and 2.x: each of the six
// named members must be the string "none"; another string of 1 to 16 characters is a policy
// this host does not support (unsupported_resource_policy), anything else a bad member
// (invalid_field). A 2.x tools member is "none" or an object (TestOpenPayloadToolsGrant).
// resources itself is optional, and open like the rest of the payload.
func TestOpenPayloadResources(t *testing.T) {
	members := []string{"extensions", "skills", "promptTemplates", "themes", "contextFiles", "tools"}
	unsupported := []any{"all", "None", " none", "none ", strings.Repeat("x", 16), "host-adapter"}
	invalid := []any{"", strings.Repeat("x", 17), nil, 0, true, []any{"none"}, map[string]any{},
		map[string]any{"mode": "host-adapter", "descriptor": map[string]any{}}}
	var tests []openCase
	for _, v := range []string{"1.0", "2.0"} {
		for _, m := range members {
			v2tools := v == "2.0" && m == "tools"
			for _, val := range unsupported {
				c := openCase{name: fmt.Sprintf("%s %s=%v", v, m, val), version: v,
					changes: []change{{"resources." + m, val}},
					code:    CodeUnsupportedResource, field: "payload.resources." + m}
				if v2tools {
					c.code = CodeInvalidField // a 2.x tools string other than "none" is not a policy
				}
				tests = append(tests, c)
			}
			for _, val := range invalid {
				if _, isObject := val.(map[string]any); isObject && v2tools {
					continue // a 2.x tools object is a host adapter grant: TestOpenPayloadToolsGrant
				}
				tests = append(tests, openCase{
					name: fmt.Sprintf("%s %s=%v", v, m, val), version: v,
					changes: []change{{"resources." + m, val}},
					code:    CodeInvalidField, field: "payload.resources." + m,
				})
			}
			tests = append(tests, openCase{
				name: fmt.Sprintf("%s %s missing", v, m), version: v,
				changes: []change{{"resources." + m, deleteMember{}}},
				code:    CodeInvalidField, field: "payload.resources." + m,
			})
		}
		tests = append(tests,
			openCase{name: v + " resources missing means none", version: v, changes: []change{{"resources", deleteMember{}}}},
			openCase{name: v + " unknown resource member ignored", version: v, changes: []change{{"resources.agents", "all"}}},
			openCase{name: v + " unknown object member ignored", version: v, changes: []change{{"resources.future", map[string]any{"x": 1}}}},
			openCase{name: v + " resources null", version: v, changes: []change{{"resources", nil}},
				code: CodeInvalidField, field: "payload.resources", reason: ndjson.ReasonType},
			openCase{name: v + " resources as a string", version: v, changes: []change{{"resources", "none"}},
				code: CodeInvalidField, field: "payload.resources", reason: ndjson.ReasonType},
			openCase{name: v + " case variant resource member", version: v, changes: []change{{"resources.Tools", "none"}},
				code: CodeInvalidField, field: "payload.resources.Tools", reason: ndjson.ReasonCaseVariant},
		)
	}
	runOpenCases(t, tests)

	// The unsupported member's error names the version the client sent.
	_, e := validateOpen(t, "2.7", apply(openBase(), change{"resources.skills", "all"}))
	if e == nil || !strings.Contains(e.Message, "protocol 2.7") {
		t.Errorf("message %v", e)
	}
}

// TestOpenPayloadSystemPrompt: systemPrompt is optional text of 0 to 262144 code points, in
// 1.x as in 2.x, "" and "none" included (Pi Daemon reads it as a plain string).
func TestOpenPayloadSystemPrompt(t *testing.T) {
	long := strings.Repeat("x", MaxSystemPromptLen)
	var tests []struct {
		name    string
		version string
		value   any
		code    string
		reason  string
		want    string
	}
	for _, v := range []string{"1.0", "2.0"} {
		for _, tt := range []struct {
			name         string
			value        any
			code, reason string
			want         string
		}{
			{"text", "Be brief.", "", "", "Be brief."},
			{"none is text", "none", "", "", "none"},
			{"empty", "", "", "", ""},
			{"at the limit", long, "", "", long},
			{"at the limit in code points", strings.Repeat("é", MaxSystemPromptLen), "", "", strings.Repeat("é", MaxSystemPromptLen)},
			{"over the limit", long + "x", CodeInvalidField, "", ""},
			{"null", nil, CodeInvalidField, ndjson.ReasonType, ""},
			{"number", 1, CodeInvalidField, ndjson.ReasonType, ""},
		} {
			tests = append(tests, struct {
				name    string
				version string
				value   any
				code    string
				reason  string
				want    string
			}{"v" + v[:1] + " " + tt.name, v, tt.value, tt.code, tt.reason, tt.want})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol, e := validateOpen(t, tt.version, apply(openBase(), change{"resources.systemPrompt", tt.value}))
			if tt.code == "" {
				if e != nil {
					t.Fatalf("refused: %v", e)
				}
				if pol.SystemPrompt != tt.want {
					t.Errorf("SystemPrompt %.20q (%d bytes), want %.20q", pol.SystemPrompt, len(pol.SystemPrompt), tt.want)
				}
				return
			}
			if e == nil || e.Code != tt.code || e.Details["field"] != "payload.resources.systemPrompt" {
				t.Fatalf("got %v, want %s at payload.resources.systemPrompt", e, tt.code)
			}
			if tt.reason != "" && e.Details["reason"] != tt.reason {
				t.Errorf("reason %v, want %s", e.Details["reason"], tt.reason)
			}
		})
	}
	// Without resources, as with resources of "none" and no systemPrompt: no prompt.
	pol, e := validateOpen(t, "1.0", apply(openBase(), change{"resources", deleteMember{}}))
	if e != nil || pol.SystemPrompt != "" || pol.Tools != ResourceNone {
		t.Fatalf("open without resources: %+v, %v", pol, e)
	}
}

func TestOpenPayloadSession(t *testing.T) {
	session := func(members map[string]any) []change { return []change{{"session", members}} }
	tests := []openCase{
		{name: "new", version: "1.0", changes: session(map[string]any{"mode": "new"})},
		{name: "continue", version: "1.0", changes: session(map[string]any{"mode": "continue"})},
		{name: "memory", version: "1.0", changes: session(map[string]any{"mode": "memory"})},
		{name: "open with a path", version: "1.0", changes: session(map[string]any{"mode": "open", "path": "/s/conv.jsonl"})},
		{name: "open without a path", version: "1.0", changes: session(map[string]any{"mode": "open"}),
			code: CodeInvalidField, field: "payload.session.path"},
		{name: "open with a relative path", version: "1.0", changes: session(map[string]any{"mode": "open", "path": "conv.jsonl"}),
			code: CodeInvalidField, field: "payload.session.path"},
		{name: "open with an unclean path", version: "2.0", changes: session(map[string]any{"mode": "open", "path": "/s/../conv.jsonl"}),
			code: CodeInvalidField, field: "payload.session.path"},
		{name: "open with an empty path", version: "2.0", changes: session(map[string]any{"mode": "open", "path": ""}),
			code: CodeInvalidField, field: "payload.session.path"},
		// Beside another mode a path is ignored once its bounds are checked, as Pi Daemon does.
		{name: "new with a path", version: "1.0", changes: session(map[string]any{"mode": "new", "path": "/s/conv.jsonl"})},
		{name: "continue with a relative path", version: "2.0", changes: session(map[string]any{"mode": "continue", "path": "conv.jsonl"})},
		{name: "memory with a path", version: "1.0", changes: session(map[string]any{"mode": "memory", "path": "/s/conv.jsonl"})},
		{name: "new with an empty path", version: "1.0", changes: session(map[string]any{"mode": "new", "path": ""}),
			code: CodeInvalidField, field: "payload.session.path"},
		{name: "new with a path over the limit", version: "1.0", changes: session(map[string]any{"mode": "new", "path": "/" + strings.Repeat("p", MaxPathLen)}),
			code: CodeInvalidField, field: "payload.session.path"},
		{name: "new with a path that is not a string", version: "1.0", changes: session(map[string]any{"mode": "new", "path": 1}),
			code: CodeInvalidField, field: "payload.session.path", reason: ndjson.ReasonType},
		{name: "mode in upper case", version: "1.0", changes: session(map[string]any{"mode": "NEW"}),
			code: CodeInvalidField, field: "payload.session.mode"},
		{name: "unknown mode", version: "1.0", changes: session(map[string]any{"mode": "fork"}),
			code: CodeInvalidField, field: "payload.session.mode"},
		{name: "empty mode", version: "1.0", changes: session(map[string]any{"mode": ""}),
			code: CodeInvalidField, field: "payload.session.mode"},
		{name: "mode missing", version: "1.0", changes: session(map[string]any{}),
			code: CodeInvalidField, field: "payload.session.mode"},
		{name: "session missing", version: "1.0", changes: []change{{"session", deleteMember{}}},
			code: CodeInvalidField, field: "payload.session"},
		{name: "session null", version: "1.0", changes: []change{{"session", nil}},
			code: CodeInvalidField, field: "payload.session", reason: ndjson.ReasonType},
		{name: "unknown session member ignored", version: "2.0", changes: session(map[string]any{"mode": "new", "sessionFile": "/x"})},
		{name: "case variant session member", version: "2.0", changes: session(map[string]any{"mode": "new", "Mode": "new"}),
			code: CodeInvalidField, field: "payload.session.Mode", reason: ndjson.ReasonCaseVariant},
		{name: "v1 ignores a relative sessionDir", version: "1.0", changes: session(map[string]any{"mode": "new", "sessionDir": "relative/dir"})},
		{name: "v1 ignores an empty sessionDir", version: "1.0", changes: session(map[string]any{"mode": "new", "sessionDir": ""})},
		{name: "v1 ignores a sessionDir of any type", version: "1.0", changes: session(map[string]any{"mode": "new", "sessionDir": 7})},
		{name: "v2 sessionDir that is not a string", version: "2.0", changes: session(map[string]any{"mode": "new", "sessionDir": 7}),
			code: CodeInvalidField, field: "payload.session.sessionDir"},
		{name: "v2 sessionDir", version: "2.0", changes: session(map[string]any{"mode": "new", "sessionDir": "/sessions"})},
		{name: "v2 relative sessionDir", version: "2.0", changes: session(map[string]any{"mode": "new", "sessionDir": "relative/dir"}),
			code: CodeInvalidField, field: "payload.session.sessionDir"},
		{name: "v2 sessionDir with a trailing slash", version: "2.0", changes: session(map[string]any{"mode": "new", "sessionDir": "/sessions/"}),
			code: CodeInvalidField, field: "payload.session.sessionDir"},
		{name: "v2 empty sessionDir", version: "2.0", changes: session(map[string]any{"mode": "new", "sessionDir": ""}),
			code: CodeInvalidField, field: "payload.session.sessionDir"},
	}
	runOpenCases(t, tests)

	pol, _ := validateOpen(t, "1.0", apply(openBase(), change{"session.sessionDir", "/sessions"}))
	if pol == nil || pol.SessionDir != "" {
		t.Errorf("v1 kept sessionDir in the policy: %+v", pol)
	}
	pol, _ = validateOpen(t, "2.0", apply(openBase(), change{"session.sessionDir", "/sessions"}))
	if pol == nil || pol.SessionDir != "/sessions" {
		t.Errorf("v2 lost sessionDir: %+v", pol)
	}
}

func TestOpenPayloadPaths(t *testing.T) {
	path4096 := "/" + strings.Repeat("a", MaxPathLen-1)
	var tests []openCase
	for _, member := range []string{"cwd", "agentDir"} {
		field := "payload." + member
		for _, p := range []string{"/", "/work", path4096, "/" + strings.Repeat("é", MaxPathLen-1), "/with space/ünïcode"} {
			tests = append(tests, openCase{name: fmt.Sprintf("%s %.30q", member, p), version: "1.0", changes: []change{{member, p}}})
		}
		for _, p := range []string{
			"", "work", "./work", "~/work", "/a//b", "/a/./b", "/a/../b", "/a/", "/a/.", "//a",
			"/a\x00b", "/a\x01b", "/a\nb", "/a\x7fb", "/a\u0085b", path4096 + "a",
		} {
			tests = append(tests, openCase{name: fmt.Sprintf("%s %.30q", member, p), version: "2.0", changes: []change{{member, p}},
				code: CodeInvalidField, field: field})
		}
		tests = append(tests, openCase{name: member + " number", version: "1.0", changes: []change{{member, 1}},
			code: CodeInvalidField, field: field, reason: ndjson.ReasonType})
	}
	tests = append(tests, openCase{name: "cwd missing", version: "1.0", changes: []change{{"cwd", deleteMember{}}},
		code: CodeInvalidField, field: "payload.cwd"})
	runOpenCases(t, tests)
}

func TestOpenPayloadModelAndName(t *testing.T) {
	model := func(m map[string]any) []change { return []change{{"model", m}} }
	tests := []openCase{
		{name: "provider at the limit", version: "1.0", changes: model(map[string]any{"provider": strings.Repeat("p", 128), "id": "m"})},
		{name: "provider at the limit in code points", version: "1.0", changes: model(map[string]any{"provider": strings.Repeat("ρ", 128), "id": "m"})},
		{name: "provider over the limit", version: "1.0", changes: model(map[string]any{"provider": strings.Repeat("p", 129), "id": "m"}),
			code: CodeInvalidField, field: "payload.model.provider"},
		{name: "provider empty", version: "1.0", changes: model(map[string]any{"provider": "", "id": "m"}),
			code: CodeInvalidField, field: "payload.model.provider"},
		{name: "provider missing", version: "1.0", changes: model(map[string]any{"id": "m"}),
			code: CodeInvalidField, field: "payload.model.provider"},
		{name: "provider with a control character", version: "1.0", changes: model(map[string]any{"provider": "p\tq", "id": "m"}),
			code: CodeInvalidField, field: "payload.model.provider"},
		{name: "id at the limit", version: "1.0", changes: model(map[string]any{"provider": "p", "id": strings.Repeat("m", 256)})},
		{name: "id over the limit", version: "1.0", changes: model(map[string]any{"provider": "p", "id": strings.Repeat("m", 257)}),
			code: CodeInvalidField, field: "payload.model.id"},
		{name: "id empty", version: "1.0", changes: model(map[string]any{"provider": "p", "id": ""}),
			code: CodeInvalidField, field: "payload.model.id"},
		{name: "thinkingLevel empty", version: "1.0", changes: model(map[string]any{"provider": "p", "id": "m", "thinkingLevel": ""}),
			code: CodeInvalidField, field: "payload.model.thinkingLevel"},
		{name: "thinkingLevel upper case", version: "1.0", changes: model(map[string]any{"provider": "p", "id": "m", "thinkingLevel": "HIGH"}),
			code: CodeInvalidField, field: "payload.model.thinkingLevel"},
		{name: "thinkingLevel unknown", version: "2.0", changes: model(map[string]any{"provider": "p", "id": "m", "thinkingLevel": "ultra"}),
			code: CodeInvalidField, field: "payload.model.thinkingLevel"},
		{name: "thinkingLevel null", version: "2.0", changes: model(map[string]any{"provider": "p", "id": "m", "thinkingLevel": nil}),
			code: CodeInvalidField, field: "payload.model.thinkingLevel", reason: ndjson.ReasonType},
		{name: "model null", version: "1.0", changes: []change{{"model", nil}},
			code: CodeInvalidField, field: "payload.model", reason: ndjson.ReasonType},
		{name: "unknown model member ignored", version: "1.0", changes: model(map[string]any{"provider": "p", "id": "m", "temperature": 1})},
		{name: "case variant model member", version: "1.0", changes: model(map[string]any{"provider": "p", "id": "m", "ID": "n"}),
			code: CodeInvalidField, field: "payload.model.ID", reason: ndjson.ReasonCaseVariant},
		{name: "name at the limit", version: "1.0", changes: []change{{"name", strings.Repeat("n", 128)}}},
		{name: "name at the limit in code points", version: "1.0", changes: []change{{"name", strings.Repeat("名", 128)}}},
		{name: "name over the limit", version: "1.0", changes: []change{{"name", strings.Repeat("n", 129)}},
			code: CodeInvalidField, field: "payload.name"},
		{name: "name empty", version: "1.0", changes: []change{{"name", ""}},
			code: CodeInvalidField, field: "payload.name"},
		{name: "name with a line break", version: "1.0", changes: []change{{"name", "a\nb"}},
			code: CodeInvalidField, field: "payload.name"},
		{name: "name null", version: "1.0", changes: []change{{"name", nil}},
			code: CodeInvalidField, field: "payload.name", reason: ndjson.ReasonType},
	}
	for _, level := range []string{"off", "minimal", "low", "medium", "high", "xhigh", "max"} {
		tests = append(tests, openCase{name: "thinkingLevel " + level, version: "1.0",
			changes: model(map[string]any{"provider": "p", "id": "m", "thinkingLevel": level})})
	}
	runOpenCases(t, tests)
}

func TestOpenPayloadStrictMembers(t *testing.T) {
	runOpenCases(t, []openCase{
		{name: "unknown member ignored", version: "2.0", changes: []change{{"tools", "all"}}},
		{name: "unknown object member ignored", version: "1.0", changes: []change{{"future", map[string]any{"a": []any{1}}}}},
		{name: "case variant", version: "1.0", changes: []change{{"CWD", "/x"}},
			code: CodeInvalidField, field: "payload.CWD", reason: ndjson.ReasonCaseVariant},
	})
	_, e := validateOpenJSON(t, "1.0", []byte(`{"cwd":"/a","cwd":"/b","session":{"mode":"new"}}`))
	if e == nil || e.Details["field"] != "payload.cwd" || e.Details["reason"] != ndjson.ReasonDuplicateKey {
		t.Errorf("duplicate cwd: %v %v", e, e.Details)
	}
}

var hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestPolicyDigest(t *testing.T) {
	// The digest is the SHA-256 of the canonical JSON; the catalog stores it, so it is pinned.
	p := &Policy{Cwd: "/w", Mode: "new", Tools: "none"}
	sum := sha256.Sum256([]byte(`{"cwd":"/w","mode":"new","tools":"none"}`))
	if got := p.Digest(); got != hex.EncodeToString(sum[:]) {
		t.Errorf("Digest() = %s, want the SHA-256 of the canonical JSON", got)
	}

	digest := func(version string, payload []byte) string {
		t.Helper()
		pol, e := validateOpenJSON(t, version, payload)
		if e != nil {
			t.Fatalf("refused %s: %v", payload, e)
		}
		d := pol.Digest()
		if !hexDigest.MatchString(d) || d != pol.Digest() {
			t.Fatalf("digest %q is not stable lowercase hex", d)
		}
		return d
	}

	// Equal payloads give equal digests, however their JSON is laid out.
	a := []byte(`{"cwd":"/w","session":{"mode":"new"},"resources":{"extensions":"none","skills":"none","promptTemplates":"none","themes":"none","contextFiles":"none","tools":"none"}}`)
	b := []byte(` { "resources" : { "tools":"none","contextFiles":"none","themes":"none","promptTemplates":"none","skills":"none","extensions":"none" },
		"session": {"mode": "new"}, "cwd": "/w" } `)
	base := digest("1.0", a)
	if digest("1.0", b) != base || digest("2.0", a) != base {
		t.Error("equal payloads have different digests")
	}
	// What a version ignores or treats as absent does not change the digest.
	same := []struct {
		name    string
		version string
		changes []change
	}{
		{"v1 sessionDir is ignored", "1.0", []change{{"session.sessionDir", "/s"}}},
		{"v1 empty systemPrompt", "1.0", []change{{"resources.systemPrompt", ""}}},
		{"v2 empty systemPrompt", "2.0", []change{{"resources.systemPrompt", ""}}},
		{"resources absent", "1.0", []change{{"resources", deleteMember{}}}},
		{"v2 resources absent", "2.0", []change{{"resources", deleteMember{}}}},
		{"unknown members", "1.0", []change{{"x", 1}, {"session.x", 1}, {"resources.x", 1}}},
	}
	base = digest("1.0", mustJSON(t, openBase()))
	for _, s := range same {
		if got := digest(s.version, mustJSON(t, apply(openBase(), s.changes...))); got != base {
			t.Errorf("%s changed the digest", s.name)
		}
	}

	// Any member that differs gives a different digest.
	model := map[string]any{"provider": "p", "id": "m"}
	variants := []struct {
		name    string
		version string
		changes []change
	}{
		{"cwd", "1.0", []change{{"cwd", "/other"}}},
		{"name", "1.0", []change{{"name", "n"}}},
		{"other name", "1.0", []change{{"name", "m"}}},
		{"agentDir", "1.0", []change{{"agentDir", "/agents"}}},
		{"mode continue", "1.0", []change{{"session.mode", "continue"}}},
		{"mode memory", "1.0", []change{{"session.mode", "memory"}}},
		{"mode open", "1.0", []change{{"session", map[string]any{"mode": "open", "path": "/s/a.jsonl"}}}},
		{"other path", "1.0", []change{{"session", map[string]any{"mode": "open", "path": "/s/b.jsonl"}}}},
		{"v2 sessionDir", "2.0", []change{{"session.sessionDir", "/s"}}},
		{"model", "1.0", []change{{"model", model}}},
		{"model provider", "1.0", []change{{"model", map[string]any{"provider": "q", "id": "m"}}}},
		{"model id", "1.0", []change{{"model", map[string]any{"provider": "p", "id": "n"}}}},
		{"thinkingLevel", "1.0", []change{{"model", map[string]any{"provider": "p", "id": "m", "thinkingLevel": "low"}}}},
		{"other thinkingLevel", "1.0", []change{{"model", map[string]any{"provider": "p", "id": "m", "thinkingLevel": "high"}}}},
		{"v2 systemPrompt", "2.0", []change{{"resources.systemPrompt", "Be brief."}}},
		{"systemPrompt none, as text", "2.0", []change{{"resources.systemPrompt", "none"}}},
		{"other v2 systemPrompt", "2.0", []change{{"resources.systemPrompt", "Be terse."}}},
	}
	if digest("1.0", mustJSON(t, apply(openBase(), change{"resources.systemPrompt", "Be brief."}))) !=
		digest("2.0", mustJSON(t, apply(openBase(), change{"resources.systemPrompt", "Be brief."}))) {
		t.Error("a v1 and a v2 systemPrompt give different policies")
	}
	seen := map[string]string{base: "base"}
	for _, v := range variants {
		d := digest(v.version, mustJSON(t, apply(openBase(), v.changes...)))
		if prev, dup := seen[d]; dup {
			t.Errorf("%s has the same digest as %s", v.name, prev)
		}
		seen[d] = v.name
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodePayload(t *testing.T) {
	cmd := func(payload string) *Command {
		return &Command{Version: Version{Major: 1, Raw: "1.0"}, Payload: json.RawMessage(payload)}
	}
	tests := []struct {
		name   string
		into   any
		in     string
		field  string // "" when accepted
		reason string
	}{
		{"empty payload", &EmptyPayload{}, `{}`, "", ""},
		{"member in an empty payload ignored", &EmptyPayload{}, `{"xxx":1}`, "", ""},
		{"duplicate unknown member", &EmptyPayload{}, `{"xxx":1,"xxx":2}`, "payload.xxx", ndjson.ReasonDuplicateKey},
		{"duplicate deep in an unknown member", &EmptyPayload{}, `{"x":{"y":[{"z":1,"z":1}]}}`, "payload.x.y[0].z", ndjson.ReasonDuplicateKey},
		{"close default", &ClosePayload{}, `{}`, "", ""},
		{"close null", &ClosePayload{}, `{"retainSession":null}`, "payload.retainSession", ndjson.ReasonType},
		{"close string", &ClosePayload{}, `{"retainSession":"false"}`, "payload.retainSession", ndjson.ReasonType},
		{"close case variant", &ClosePayload{}, `{"RetainSession":false}`, "payload.RetainSession", ndjson.ReasonCaseVariant},
		{"drain duplicate", &DrainPayload{}, `{"timeoutMs":1,"timeoutMs":2}`, "payload.timeoutMs", ndjson.ReasonDuplicateKey},
		{"list unknown ignored", &ListSessionsPayload{}, `{"cursor":"c","page":2}`, "", ""},
		{"open unknown nested ignored", &OpenPayload{}, `{"cwd":"/","session":{"mode":"new","x":1}}`, "", ""},
		{"open case variant nested", &OpenPayload{}, `{"cwd":"/","session":{"mode":"new","MODE":"new"}}`, "payload.session.MODE", ndjson.ReasonCaseVariant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := DecodePayload(cmd(tt.in), tt.into)
			if tt.field == "" {
				if e != nil {
					t.Fatalf("refused: %v", e)
				}
				return
			}
			if e == nil || e.Code != CodeInvalidField || e.Details["field"] != tt.field || e.Details["reason"] != tt.reason {
				t.Fatalf("got %v %v, want invalid_field %s at %s", e, e.Details, tt.reason, tt.field)
			}
		})
	}
	// A refusal without a member names none.
	e := DecodePayload(cmd(`[]`), &EmptyPayload{})
	if e == nil || e.Code != CodeInvalidField {
		t.Fatalf("array payload: %v", e)
	}
	if _, ok := e.Details["field"]; ok {
		t.Errorf("array payload names a field: %v", e.Details)
	}
}

func TestClosePayloadRetain(t *testing.T) {
	yes, no := true, false
	for _, tt := range []struct {
		p    ClosePayload
		want bool
	}{{ClosePayload{}, true}, {ClosePayload{&yes}, true}, {ClosePayload{&no}, false}} {
		if got := tt.p.Retain(); got != tt.want {
			t.Errorf("Retain() = %v, want %v", got, tt.want)
		}
	}
}

func TestDrainPayloadValidate(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", DefaultDrainMs, true}, {"0", 0, true}, {"86400000", MaxDrainTimeoutMs, true},
		// Any JSON number worth an integer, as Pi Daemon's Number.isSafeInteger reads it.
		{"1e3", 1000, true}, {"1000.0", 1000, true}, {"-0", 0, true}, {"8.64e7", MaxDrainTimeoutMs, true},
		{"86400001", 0, false}, {"-1", 0, false}, {"0.5", 0, false}, {"null", 0, false}, {`"5"`, 0, false},
		{"true", 0, false}, {"1e400", 0, false},
	} {
		var raw json.RawMessage
		if tt.in != "" {
			raw = json.RawMessage(tt.in)
		}
		got, e := DrainPayload{TimeoutMs: raw}.Validate()
		if tt.ok != (e == nil) || got != tt.want {
			t.Errorf("Validate(%s) = %d, %v", tt.in, got, e)
		}
		if e != nil && e.Details["field"] != "payload.timeoutMs" {
			t.Errorf("field %v", e.Details)
		}
	}
}

func TestListSessionsPayloadValidate(t *testing.T) {
	n := func(i int) *int { return &i }
	for _, tt := range []struct {
		p     ListSessionsPayload
		want  int
		field string
	}{
		{ListSessionsPayload{}, DefaultPageSize, ""},
		{ListSessionsPayload{Limit: n(1)}, 1, ""},
		{ListSessionsPayload{Limit: n(MaxPageSize)}, MaxPageSize, ""},
		{ListSessionsPayload{Cursor: strings.Repeat("c", 512)}, DefaultPageSize, ""},
		{ListSessionsPayload{Cursor: strings.Repeat("ç", 512)}, DefaultPageSize, ""},
		{ListSessionsPayload{Limit: n(0)}, 0, "payload.limit"},
		{ListSessionsPayload{Limit: n(MaxPageSize + 1)}, 0, "payload.limit"},
		{ListSessionsPayload{Cursor: strings.Repeat("c", 513)}, 0, "payload.cursor"},
	} {
		got, e := tt.p.Validate()
		if got != tt.want || (e == nil) != (tt.field == "") || (e != nil && e.Details["field"] != tt.field) {
			t.Errorf("Validate(%+v) = %d, %v", tt.p, got, e)
		}
	}
}

// TestOpenPayloadToolsGrant: in 2.x, resources.tools may be {mode:"host-adapter", descriptor}.
// The wrapper is closed here; the descriptor itself is validated by the tool-adapter layer,
// which knows the host incarnation it must be bound to. The codes are Pi Daemon's: a member
// other than mode and descriptor is invalid_tool_adapter_descriptor, a mode other than
// "host-adapter" (of any type, or none) unsupported_resource_policy.
func TestOpenPayloadToolsGrant(t *testing.T) {
	descriptor := map[string]any{"adapterId": "fs"}
	pol, e := validateOpen(t, "2.0", apply(openBase(), change{"resources.tools", map[string]any{"mode": "host-adapter", "descriptor": descriptor}}))
	if e != nil || pol.Tools != ToolsHostAdapter {
		t.Fatalf("grant refused: %v %+v", e, pol)
	}
	for _, tc := range []struct {
		name        string
		tools       any
		code, field string
	}{
		{"no mode", map[string]any{"descriptor": descriptor}, CodeUnsupportedResource, "payload.resources.tools.mode"},
		{"other mode", map[string]any{"mode": "builtin", "descriptor": descriptor}, CodeUnsupportedResource, "payload.resources.tools.mode"},
		{"mode not a string", map[string]any{"mode": 1, "descriptor": descriptor}, CodeUnsupportedResource, "payload.resources.tools.mode"},
		{"descriptor not an object", map[string]any{"mode": "host-adapter", "descriptor": "x"}, CodeInvalidToolDescriptor, "payload.resources.tools.descriptor"},
		{"no descriptor", map[string]any{"mode": "host-adapter"}, CodeInvalidToolDescriptor, "payload.resources.tools.descriptor"},
		{"smuggled member", map[string]any{"mode": "host-adapter", "descriptor": descriptor, "token": "t"}, CodeInvalidToolDescriptor, "payload.resources.tools.token"},
		{"case variant member", map[string]any{"mode": "host-adapter", "descriptor": descriptor, "Mode": "x"}, CodeInvalidToolDescriptor, "payload.resources.tools.Mode"},
	} {
		_, e := validateOpen(t, "2.0", apply(openBase(), change{"resources.tools", tc.tools}))
		if e == nil || e.Code != tc.code || e.Details["field"] != tc.field {
			t.Errorf("%s: %v, want %s at %s", tc.name, e, tc.code, tc.field)
		}
	}
	// In 1.x a tools object is not a string: a bad member, as in Pi Daemon's 1.x parser.
	_, e = validateOpen(t, "1.0", apply(openBase(), change{"resources.tools", map[string]any{"mode": "host-adapter", "descriptor": descriptor}}))
	if e == nil || e.Code != CodeInvalidField || e.Details["field"] != "payload.resources.tools" {
		t.Errorf("1.x tools object: %v", e)
	}
}

// TestOpenPayloadManagedGrant: in 2.x, resources.tools may be {mode:"airlock-fs", operations}:
// the daemon mints the grant. Its policy is a host-adapter policy; operations must be a
// non-empty array of distinct names, and each mode refuses the other's member.
func TestOpenPayloadManagedGrant(t *testing.T) {
	ops := []any{"fs.read", "fs.list"}
	v := mustVersion(t, "2.0")
	b, _ := json.Marshal(apply(openBase(), change{"resources.tools", map[string]any{"mode": "airlock-fs", "operations": ops}}))
	var p OpenPayload
	if e := DecodePayload(&Command{Version: v, Operation: OpOpen, Payload: b}, &p); e != nil {
		t.Fatal(e)
	}
	pol, e := p.Validate(v)
	if e != nil || pol.Tools != ToolsHostAdapter || !slices.Equal(p.ManagedOperations(), []string{"fs.read", "fs.list"}) || p.ToolDescriptor() != nil {
		t.Fatalf("managed grant: %v %+v %v", e, pol, p.ManagedOperations())
	}
	for _, tc := range []struct {
		name        string
		tools       any
		code, field string
	}{
		{"no operations", map[string]any{"mode": "airlock-fs"}, CodeInvalidField, "payload.resources.tools.operations"},
		{"empty operations", map[string]any{"mode": "airlock-fs", "operations": []any{}}, CodeInvalidField, "payload.resources.tools.operations"},
		{"operations not an array", map[string]any{"mode": "airlock-fs", "operations": "fs.read"}, CodeInvalidField, "payload.resources.tools.operations"},
		{"operation not a string", map[string]any{"mode": "airlock-fs", "operations": []any{1}}, CodeInvalidField, "payload.resources.tools.operations"},
		{"repeated operation", map[string]any{"mode": "airlock-fs", "operations": []any{"fs.read", "fs.read"}}, CodeInvalidField, "payload.resources.tools.operations"},
		{"control character", map[string]any{"mode": "airlock-fs", "operations": []any{"fs.\nread"}}, CodeInvalidField, "payload.resources.tools.operations"},
		{"too many", map[string]any{"mode": "airlock-fs", "operations": slices.Repeat([]any{"x"}, 17)}, CodeInvalidField, "payload.resources.tools.operations"},
		{"with a descriptor", map[string]any{"mode": "airlock-fs", "operations": ops, "descriptor": map[string]any{}}, CodeInvalidToolDescriptor, "payload.resources.tools.descriptor"},
		{"host-adapter with operations", map[string]any{"mode": "host-adapter", "operations": ops, "descriptor": map[string]any{}}, CodeInvalidToolDescriptor, "payload.resources.tools.operations"},
	} {
		_, e := validateOpen(t, "2.0", apply(openBase(), change{"resources.tools", tc.tools}))
		if e == nil || e.Code != tc.code || e.Details["field"] != tc.field {
			t.Errorf("%s: %v, want %s at %s", tc.name, e, tc.code, tc.field)
		}
	}
}

// TestOpenPayloadLifetime: lifetime "connection" (2.x, memory sessions only) enters the
// policy; "session" is the default and leaves it as it was; 1.x ignores the member.
func TestOpenPayloadLifetime(t *testing.T) {
	memory := change{"session", map[string]any{"mode": "memory"}}
	pol, e := validateOpen(t, "2.0", apply(openBase(), memory, change{"lifetime", "connection"}))
	if e != nil || pol.Lifetime != LifetimeConnection {
		t.Fatalf("connection: %v %+v", e, pol)
	}
	plain, _ := validateOpen(t, "2.0", apply(openBase(), memory))
	if pol.Digest() == plain.Digest() {
		t.Fatal("a connection-scoped policy has the digest of a durable one")
	}
	pol, e = validateOpen(t, "2.0", apply(openBase(), memory, change{"lifetime", "session"}))
	if e != nil || pol.Lifetime != "" || pol.Digest() != plain.Digest() {
		t.Fatalf("session: %v %+v", e, pol)
	}
	for _, tc := range []struct {
		name string
		p    map[string]any
	}{
		{"not memory", apply(openBase(), change{"lifetime", "connection"})},
		{"unknown", apply(openBase(), memory, change{"lifetime", "process"})},
		{"not a string", apply(openBase(), memory, change{"lifetime", 1})},
	} {
		if _, e := validateOpen(t, "2.0", tc.p); e == nil || e.Code != CodeInvalidField || e.Details["field"] != "payload.lifetime" {
			t.Errorf("%s: %v", tc.name, e)
		}
	}
	if pol, e := validateOpen(t, "1.0", apply(openBase(), change{"lifetime", "connection"})); e != nil || pol.Lifetime != "" {
		t.Errorf("1.x: %v %+v", e, pol)
	}
}
