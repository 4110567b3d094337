package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestEnvelopeClient: a 2.x command's client member labels its MCP client; a bad one is
// refused with the field, a case variant is refused, and a 1.x command ignores it.
func TestEnvelopeClient(t *testing.T) {
	line := func(v, client string) []byte {
		return []byte(`{"protocolVersion":"` + v + `","requestId":"r1","operation":"status",` + client + `"payload":{}}`)
	}
	cmd, pe := ParseCommand(line("2.0", `"client":"claude-code",`))
	if pe != nil || cmd.Client != "claude-code" {
		t.Fatalf("client: %+v %v", cmd, pe)
	}
	for name, member := range map[string]string{
		"not a string": `"client":7,`,
		"empty":        `"client":"",`,
		"control":      `"client":"a\u0007b",`,
		"too long":     `"client":"` + strings.Repeat("c", MaxClientNameLen+1) + `",`,
	} {
		if _, pe := ParseCommand(line("2.0", member)); pe == nil || pe.Error.Code != CodeInvalidField || pe.Error.Details["field"] != "client" {
			t.Errorf("%s: %+v", name, pe)
		}
	}
	if _, pe := ParseCommand(line("2.0", `"Client":"x",`)); pe == nil {
		t.Error("a case variant of client was accepted")
	}
	if cmd, pe := ParseCommand(line("1.0", `"client":7,`)); pe != nil || cmd.Client != "" {
		t.Errorf("1.0: %+v %v", cmd, pe)
	}
}

// TestOpenPolicyMember: the open payload's policy member names exactly one of a built-in
// policy and an absolute file; a 1.x open ignores it.
func TestOpenPolicyMember(t *testing.T) {
	open := func(policy string) *OpenPayload {
		var p OpenPayload
		if err := json.Unmarshal([]byte(`{"cwd":"/w","session":{"mode":"memory"},"policy":`+policy+`}`), &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	for _, tc := range []struct {
		policy, field string
		want          PolicyRef
	}{
		{policy: `{"name":"read-only"}`, want: PolicyRef{Name: "read-only"}},
		{policy: `{"file":"/etc/airlock/p.json"}`, want: PolicyRef{File: "/etc/airlock/p.json"}},
		{policy: `{"name":"a","file":"/p"}`, field: "payload.policy"},
		{policy: `{}`, field: "payload.policy"},
		{policy: `"read-only"`, field: "payload.policy"},
		{policy: `{"name":"a","colour":1}`, field: "payload.policy"},
		{policy: `{"file":"relative.json"}`, field: "payload.policy.file"},
	} {
		p := open(tc.policy)
		_, e := p.Validate(Version{Major: 2, Raw: Version2})
		if tc.field != "" {
			if e == nil || e.Details["field"] != tc.field {
				t.Errorf("%s: %v, want invalid %s", tc.policy, e, tc.field)
			}
			continue
		}
		if e != nil || p.PolicyRef() == nil || *p.PolicyRef() != tc.want {
			t.Errorf("%s: %v %+v", tc.policy, e, p.PolicyRef())
		}
	}
	p := open(`7`)
	if _, e := p.Validate(Version{Major: 1, Raw: Version1}); e != nil || p.PolicyRef() != nil {
		t.Errorf("1.0 open: %v", e)
	}
}
