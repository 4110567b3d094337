package policy

import (
	"os"
	"testing"
)

// FuzzParse: Parse never panics, and a policy it accepts decides every call with a valid
// decision and survives its own document's round trip.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("testdata/example.json"); err == nil {
		f.Add(b, "fs.read", "src/.env")
	}
	f.Add([]byte(`{"default":"allow"}`), "fs.write", ".")
	f.Add([]byte(`{"default":"ask","rules":[{"operations":["fs.*"],"paths":["**/a/**/b*"],"decision":"deny"}]}`), "fs.edit", "x/a/y/b1")
	f.Add([]byte(`{"default":"deny","rules":[{"capability":"*","actions":["observe"],"decision":"allow"}]}`), "observe", "lamp")
	f.Fuzz(func(t *testing.T, data []byte, op, path string) {
		p, err := Parse(data)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Parse error %T", err)
			}
			return
		}
		if !p.DecideFS(op, path).Decision.valid() || !p.DecideAction(path, op).Decision.valid() {
			t.Fatal("invalid decision")
		}
		q, err := FromDocument(p.Document())
		if err != nil {
			t.Fatalf("round trip: %v", err)
		}
		if q.DecideFS(op, path) != p.DecideFS(op, path) {
			t.Fatal("round trip changed a decision")
		}
		_ = p.Check()
	})
}
