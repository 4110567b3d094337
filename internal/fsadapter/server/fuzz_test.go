package server

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeAdminRequest checks the admin request decoder's properties: an accepted request has
// a known op and exactly that op's members, and survives a round trip unchanged; a refused one
// is invalid_request, and its message quotes nothing from the input.
func FuzzDecodeAdminRequest(f *testing.F) {
	for _, s := range []string{
		`{"op":"grants"}`,
		`{"op":"revoke-grant","grantId":"g-abc"}`,
		`{"op":"grant","root":"/srv/x","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read"]}`,
		`{"op":"grant","root":"/srv/x","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read"],"limits":{"maxQueuedRequests":0},"adapterId":"a"}`,
		`{"op":"grant","root":"/srv/x","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read"],"grantId":"d-1.a_b"}`,
		`{"op":"grant","root":"/srv/x","hostInstanceId":"h","sessionId":"s","generation":1,"operations":["fs.read"],"grantId":"a b"}`,
		`{"op":"grants","op":"grant"}`,
		`{"OP":"grants"}`,
		`{"op":"grant","root":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, e := DecodeAdminRequest(line)
		if e != nil {
			if r != nil || e.Code != CodeInvalidRequest {
				t.Fatalf("refusal %v with request %v", e, r)
			}
			var probe struct {
				Root string `json:"root"`
			}
			if json.Unmarshal(line, &probe) == nil && len(probe.Root) > 8 && strings.Contains(e.Message, probe.Root) {
				t.Fatalf("message quotes the input: %s", e.Message)
			}
			return
		}
		switch r.Op {
		case OpGrant:
			if r.Root == nil || r.HostInstanceID == nil || r.SessionID == nil || r.Generation == nil || r.Operations == nil || (r.GrantID != nil && !validGrantID(*r.GrantID)) {
				t.Fatalf("grant with wrong members: %+v", r)
			}
		case OpGrants, OpRevokeGrant:
			if r.Root != nil || r.Limits != nil || r.Operations != nil || (r.GrantID != nil) != (r.Op == OpRevokeGrant) {
				t.Fatalf("%s with wrong members: %+v", r.Op, r)
			}
		default:
			t.Fatalf("accepted op %q", r.Op)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, e := DecodeAdminRequest(b)
		if e != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %v %+v %+v", e, r, r2)
		}
	})
}
