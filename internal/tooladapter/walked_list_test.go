package tooladapter

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// TestListResultWalked: a listing in a result frame is settled by the walked check when it is
// valid, whatever its spacing, escapes and member order, and every listing the protocol's check
// refuses is refused in a frame too, with the same code.
func TestListResultWalked(t *testing.T) {
	valid := []string{
		`{"entries":[],"truncated":true}`,
		`{"entries":[{"name":".git","type":"directory"},{"name":"` + strings.Repeat("n", 255) + `","type":"file","size":0,"modifiedAt":"2026-12-02T13:00:00.123456789Z"}],"truncated":false}`,
		string(listData(MaxListEntries)),
		" { \"truncated\" : false ,\n\t\"entries\" : [ { \"size\" : 3 , \"type\" : \"file\" , \"name\" : \"a b\" } , {\"modifiedAt\":\"2026-01-02T03:04:05Z\",\"name\":\"\\u00e9t\\u00e9\",\"type\":\"directory\"} ] } ",
		`{"entries":[{"name":"caf\u00e9 \"q\"","type":"file","size":9007199254740991}],"truncated":false}`,
		`{"entries":[{"name":"été","type":"file","size":-0}],"truncated":false}`,
	}
	for _, d := range valid {
		if !validResultWalked(OpList, []byte(d)) {
			t.Errorf("walked check does not settle the valid listing %.80q", d)
		}
		if e := ValidateResult(OpList, json.RawMessage(d)); e != nil {
			t.Errorf("ValidateResult refuses %.80q: %v", d, e)
		}
		if _, e := DecodeFrame(listFrame(t, d)); e != nil {
			t.Errorf("result frame with %.80q refused: %v", d, e)
		}
	}
	// A key spelled with an escape is the same key: valid, left to the full check.
	escaped := `{"entr\u0069es":[{"n\u0061me":"a","type":"file"}],"truncated":false}`
	if validResultWalked(OpList, []byte(escaped)) {
		t.Errorf("walked check settles %q, whose keys it does not read", escaped)
	}
	if _, e := DecodeFrame(listFrame(t, escaped)); e != nil {
		t.Errorf("result frame with %q refused: %v", escaped, e)
	}
	invalid := []string{
		`{"entries":[{"name":"..","type":"file"}],"truncated":false}`,
		`{"entries":[{"name":"a/b","type":"file"}],"truncated":false}`,
		`{"entries":[{"name":"a\u0000","type":"file"}],"truncated":false}`,
		`{"entries":[{"name":"a\u0085","type":"file"}],"truncated":false}`,
		`{"entries":[{"name":"` + strings.Repeat("n", 256) + `","type":"file"}],"truncated":false}`,
		`{"entries":[{"name":"","type":"file"}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"symlink"}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"fil\u0065x"}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","modifiedAt":"yesterday"}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","modifiedAt":"2026-01-02T03:04:05+01:00"}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","size":-1}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","size":9007199254740992}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","size":1.0}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","size":1e2}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","size":"1"}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","size":null}],"truncated":false}`,
		`{"entries":[{"name":null,"type":"file"}],"truncated":false}`,
		`{"entries":[{"type":"file"}],"truncated":false}`,
		`{"entries":[{"name":"a"}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","target":"/etc"}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","Size":1}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","size":{"n":1}}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file"},null],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file"},[]],"truncated":false}`,
		`{"entries":[1],"truncated":false}`,
		`{"entries":{},"truncated":false}`,
		`{"entries":null,"truncated":false}`,
		`{"entries":[]}`,
		`{"truncated":false}`,
		`{"entries":[],"truncated":"false"}`,
		`{"entries":[],"truncated":null}`,
		`{"entries":[],"truncated":false,"more":1}`,
		`{"Entries":[],"truncated":false}`,
		`[]`,
		string(listData(MaxListEntries + 1)),
	}
	for _, d := range invalid {
		if validResultWalked(OpList, []byte(d)) {
			t.Errorf("walked check accepts the invalid listing %.80q", d)
		}
		if e := ValidateResult(OpList, json.RawMessage(d)); e == nil || e.Code != CodeProtocolInvalid {
			t.Errorf("ValidateResult(%.80q) = %v, want %s", d, e, CodeProtocolInvalid)
		}
		if _, e := DecodeFrame(listFrame(t, d)); e == nil || e.Code != CodeProtocolInvalid {
			t.Errorf("result frame with %.80q: %v, want %s", d, e, CodeProtocolInvalid)
		}
	}
}

// listFrame is a result frame line of fs.list carrying data as it stands.
func listFrame(t testing.TB, data string) []byte {
	t.Helper()
	line, err := marshalFrame(&Frame{Kind: KindResult, Identity: testIdentity, RequestID: "r-1", IdempotencyKey: "tool-abc", Operation: OpList, OK: true, Data: json.RawMessage(data)})
	if err != nil {
		t.Fatal(err)
	}
	// marshalFrame compacts Data; put the listing back byte for byte, spacing and all.
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(data)); err != nil {
		t.Fatal(err)
	}
	return bytes.Replace(line, compact.Bytes(), []byte(data), 1)
}

// FuzzListResultWalked: the walked check of a listing accepts only what ValidateResult, the
// reference, accepts.
func FuzzListResultWalked(f *testing.F) {
	for _, s := range []string{
		`{"entries":[],"truncated":true}`, string(listData(3)),
		`{"entries":[{"name":".git","type":"directory"},{"name":"a","type":"file","size":0,"modifiedAt":"2026-12-02T13:00:00.123456789Z"}],"truncated":false}`,
		" { \"truncated\" : false , \"entries\" : [ { \"size\" : 3 , \"type\" : \"file\" , \"name\" : \"a b\" } ] } ",
		`{"entries":[{"name":"\u00e9\"","type":"file"}],"truncated":false}`, `{"entries":[{"name":"a\u0085","type":"file"}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","size":1.0}],"truncated":false}`, `{"entries":[{"name":"a","type":"file","Size":1}],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","size":{"n":1}}],"truncated":false}`, `{"entries":[{"name":"a","type":"file"},null],"truncated":false}`,
		`{"entries":[{"name":"a","type":"file","modifiedAt":"2026-01-02T03:04:05\u005a"}],"truncated":false}`,
		`{"entries":null,"truncated":false}`, `{"entries":[],"truncated":"false"}`, `{"entr\u0069es":[],"truncated":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if ndjson.Valid(raw) != nil {
			return
		}
		var got []listEntry
		truncated, ok := WalkList(raw, func(name, typ string, size int64, modifiedAt string) {
			e := listEntry{Name: &name, Type: &typ, Size: &size}
			if modifiedAt != "" {
				e.ModifiedAt = &modifiedAt
			}
			got = append(got, e)
		})
		if ok != validResultWalked(OpList, raw) {
			t.Fatalf("WalkList and validResultWalked disagree on %q", raw)
		}
		if !ok {
			return
		}
		if e := ValidateResult(OpList, raw); e != nil {
			t.Fatalf("validResultWalked accepts the listing %q, ValidateResult refuses it (%v)", raw, e)
		}
		// The values WalkList gives are encoding/json's, a missing size as 0.
		var want listResult
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		for i := range *want.Entries {
			if (*want.Entries)[i].Size == nil {
				(*want.Entries)[i].Size = new(int64)
			}
		}
		if *want.Truncated != truncated || len(got) != len(*want.Entries) || (len(got) > 0 && !reflect.DeepEqual(got, *want.Entries)) {
			t.Fatalf("WalkList(%q) = %v %+v, encoding/json %+v", raw, truncated, got, want)
		}
	})
}
