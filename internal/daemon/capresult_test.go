package daemon

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// TestCapabilityResultAppendJSON: the hand-written encoding of an observation or action result
// is byte for byte encoding/json's, with results compact or not, and refuses what encoding/json
// refuses.
func TestCapabilityResultAppendJSON(t *testing.T) {
	ids := []string{"desk_lamp", "a", "", "é\"\\<>&\u2028", "x\x01"}
	results := []string{`{"on":true,"brightness":60}`, `{ "on" : true }`, `{"s":"a b\n\u00e9<>&"}`, `{}`, `{"state":[1, 2.5e3,null]}`,
		`{"value":"x"}`}
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		res := &CapabilityResult{CapabilityID: ids[r.IntN(len(ids))], Result: json.RawMessage(results[r.IntN(len(results))])}
		if r.IntN(2) == 0 {
			res.Action = ids[r.IntN(len(ids))]
		}
		if r.IntN(10) == 0 {
			res.Result = nil
		}
		got, ok := res.AppendJSON([]byte("prefix"))
		want, err := ndjson.Marshal(res)
		if !ok || err != nil {
			t.Fatalf("%+v: ok %v, encoding/json %v", res, ok, err)
		}
		if want = bytes.TrimSuffix(want, []byte("\n")); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("differs:\nfast %s\njson prefix%s", got, want)
		}
	}
	if _, ok := (&CapabilityResult{CapabilityID: "a", Result: json.RawMessage(`{"a":`)}).AppendJSON(nil); ok {
		t.Fatal("a result that is not JSON was encoded")
	}
}
