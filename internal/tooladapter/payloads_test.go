package tooladapter

import (
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// modifiedAtPattern is the schema's pattern, the reference for validModifiedAt.
var modifiedAtPattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$`)

func TestValidModifiedAt(t *testing.T) {
	base := "2026-12-02T13:00:00.123456789Z"
	cases := []string{base, "2026-12-02T13:00:00Z", "2026-12-02T13:00:00.Z", "2026-12-02T13:00:00.1234567890Z",
		"2026-12-02T13:00:00.1Z\n", "2026-12-02 13:00:00Z", "", "Z", "2026-12-02T13:00:00z", "٢٠٢٦-12-02T13:00:00Z"}
	r := rand.New(rand.NewPCG(9, 10))
	const alphabet = "0123456789-T:.Z x\n"
	for range 100000 {
		b := []byte(base[:19+r.IntN(12)])
		if r.IntN(3) > 0 {
			b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
		}
		if r.IntN(2) == 0 {
			b = append(b, 'Z')
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := validModifiedAt(s), modifiedAtPattern.MatchString(s); got != want {
			t.Fatalf("validModifiedAt(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}

// TestPayloadErrorsNameTheMember: a payload the runtime refuses names the member and what it
// must be, in details.field and in the message (which a model reads and acts on), and never
// quotes the member's value.
func TestPayloadErrorsNameTheMember(t *testing.T) {
	cases := []struct {
		op, payload, field, msg string
	}{
		{OpList, `{"path":".","maxEntries":0}`, "maxEntries", "payload member maxEntries must be an integer from 1 to 10000"},
		{OpList, `{"path":".","maxEntries":"zzqx"}`, "maxEntries", "payload member maxEntries must be an integer from 1 to 10000"},
		{OpList, `{"path":".","recursive":true}`, "recursive", "payload member recursive is not one this operation takes"},
		{OpRead, `{}`, "path", `payload member path is missing: it must be a path relative to the granted directory`},
		{OpRead, `{"path":"a","offset":-1}`, "offset", "payload member offset must be an integer of at least 0"},
		{OpSearch, `{"path":".","query":""}`, "query", "payload member query must be a non-empty string of at most 4096 characters"},
		{OpSearch, `{"path":"."}`, "query", "payload member query is missing: it must be a non-empty string"},
		{OpWrite, `{"path":"a","content":"x","expectedDigest":"sha256:secretish"}`, "expectedDigest", "payload member expectedDigest must be 64 lowercase hexadecimal digits"},
		{OpWrite, `{"path":"a"}`, "content", "payload member content is missing: it must be a string of at most 4194304 bytes"},
		{OpEdit, `{"path":"a","edits":[]}`, "edits", "payload member edits must be an array of 1 to 256 edits"},
		{OpEdit, `{"path":"a","edits":[{"oldText":"","newText":"b"}]}`, "edits.oldText", "payload member edits.oldText must be a non-empty string"},
		// A member of the wrong JSON type (null included) says what it must be as a range
		// failure does, naming the type; details.field is the member as the decoder names it.
		{OpRead, `{"path":123}`, "path", `payload member path must be a string, a path relative to the granted directory ("." for the directory itself)`},
		{OpRead, `{"path":"a","maxBytes":"10"}`, "maxBytes", "payload member maxBytes must be an integer from 1 to 4194304"},
		{OpRead, `{"path":"a","offset":1.5}`, "offset", "payload member offset must be an integer of at least 0"},
		{OpRead, `{"path":"a","offset":1e30}`, "offset", "payload member offset must be an integer of at least 0"},
		{OpRead, `{"path":"a","maxBytes":null}`, "maxBytes", "payload member maxBytes must be an integer from 1 to 4194304"},
		{OpSearch, `{"path":".","query":["zzqx"]}`, "query", "payload member query must be a non-empty string of at most 4096 characters"},
		{OpSearch, `{"path":".","query":"q","maxResults":{}}`, "maxResults", "payload member maxResults must be an integer from 1 to 10000"},
		{OpWrite, `{"path":"a","content":7}`, "content", "payload member content must be a string of at most 4194304 bytes"},
		{OpWrite, `{"path":"a","content":"x","create":"yes"}`, "create", "payload member create must be true or false"},
		{OpWrite, `{"path":"a","content":"x","overwrite":1}`, "overwrite", "payload member overwrite must be true or false"},
		{OpWrite, `{"path":"a","content":"x","expectedDigest":5}`, "expectedDigest", "payload member expectedDigest must be a string of 64 lowercase hexadecimal digits"},
		{OpEdit, `{"path":"a","edits":"hello"}`, "edits", "payload member edits must be an array of 1 to 256 edits, each {oldText, newText}"},
		{OpEdit, `{"path":"a","edits":[1]}`, "edits[0]", "payload member edits[0] must be an object {oldText, newText}"},
		{OpEdit, `{"path":"a","edits":[{"oldText":"a","newText":"b"},{"oldText":1,"newText":"x"}]}`, "edits[1].oldText", "payload member edits[1].oldText must be a non-empty string of at most 4194304 bytes"},
		{OpEdit, `{"path":"a","edits":[{"oldText":"a","newText":false}]}`, "edits[0].newText", "payload member edits[0].newText must be a string of at most 4194304 bytes"},
	}
	for _, tc := range cases {
		e := ValidatePayload(tc.op, json.RawMessage(tc.payload))
		if e == nil || e.Code != CodeRequestInvalid || e.Details[DetailField] != tc.field || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%s %s: %+v, want %s naming %s: %q", tc.op, tc.payload, e, CodeRequestInvalid, tc.field, tc.msg)
			continue
		}
		if strings.Contains(e.Message, "zzqx") || strings.Contains(e.Message, "secretish") {
			t.Errorf("%s %s: the message quotes the value: %q", tc.op, tc.payload, e.Message)
		}
	}
}
