package server

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/ndjson"
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
			if r.Root == nil || r.HostInstanceID == nil || r.SessionID == nil || r.Generation == nil || r.Operations == nil || r.GrantID != nil {
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

var decodeArgsSeeds = []string{
	`{"path":"a/b/stat.txt"}`, `{"path":"read4k.txt","offset":0,"maxBytes":4096}`, ` { "path" : "x" , "offset" : -0 } `,
	`{"path":"a\u0041"}`, `{"path":"a","path":"b"}`, `{"Path":"a"}`, `{"path":null}`, `{"path":"a","offset":1.0}`,
	`{"path":"a","maxBytes":1e3}`, `{"path":"a","offset":null}`, `{"path":"a","bogus":1}`, `{}`, `[]`,
	`{"path":"a","offset":9223372036854775808}`, "{\"path\":\"bad\xff\"}",
}

// FuzzDecodeArgs: the one-walk decoding of stat and read payloads returns what the full decoding
// returns, and nothing for a payload the full decoding refuses.
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range decodeArgsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, c := range []struct {
			op   string
			want any
		}{{"fs.stat", &fsops.StatPayload{}}, {"fs.read", &fsops.ReadPayload{}}} {
			got := decodeArgsFast(c.op, raw)
			if got == nil {
				continue
			}
			if err := ndjson.Decode(raw, c.want, ndjson.Closed); err != nil {
				t.Fatalf("%s %q: fast decoding accepts what the full one refuses: %v", c.op, raw, err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%s %q: fast %+v, full %+v", c.op, raw, got, c.want)
			}
		}
	})
}

func TestDecodeArgsFast(t *testing.T) {
	for _, s := range decodeArgsSeeds {
		t.Run("", func(t *testing.T) {
			for _, op := range []string{"fs.stat", "fs.read"} {
				got := decodeArgsFast(op, []byte(s))
				var want any = &fsops.StatPayload{}
				if op == "fs.read" {
					want = &fsops.ReadPayload{}
				}
				err := ndjson.Decode([]byte(s), want, ndjson.Closed)
				if got != nil && (err != nil || !reflect.DeepEqual(got, want)) {
					t.Fatalf("%s %q: fast %+v, full %+v (%v)", op, s, got, want, err)
				}
			}
		})
	}
	if decodeArgsFast("fs.stat", []byte(`{"path":"a/b"}`)) == nil || decodeArgsFast("fs.read", []byte(`{"path":"a","maxBytes":5}`)) == nil {
		t.Fatal("the usual payloads take the slow path")
	}
}
