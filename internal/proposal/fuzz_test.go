package proposal_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/proposal"
)

var (
	envRef     = regexp.MustCompile(`\$(\{|[A-Za-z_])`)
	assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
)

// FuzzParse: Parse never panics; what it accepts passes Check again after a round trip,
// holds no argv that sets or refers to environment and no interpreter option before the
// script, and what it refuses is refused with a proposal code.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"name":"light","command":"python3","args":["light.py"],"capabilities":["light"]}`))
	f.Add([]byte(`{"name":"a","command":"sh","args":["a.sh","API_KEY=x"],"capabilities":["x"]}`))
	f.Add([]byte(`{"name":"a","command":"env","args":["sh","a.sh"],"capabilities":["x"]}`))
	f.Add([]byte(`{"name":"a","command":"sh","args":["-c","id"],"capabilities":["x"]}`))
	f.Add([]byte(`{"name":"a","command":"bin/a","capabilities":["x"],"publish":{"room":"home","capabilities":[{"capabilityId":"x","actions":["on"],"observe":true}]}}`))
	f.Add([]byte(`{"name":"a","Name":"b"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := proposal.Parse(data)
		if err != nil {
			if proposal.CodeOf(err) == "" {
				t.Fatalf("a refusal without a code: %v", err)
			}
			return
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := proposal.Parse(b)
		if err != nil {
			t.Fatalf("an accepted proposal does not parse again: %v\n%s", err, b)
		}
		if proposal.Interpreter(q.Command) && strings.HasPrefix(q.Args[0], "-") {
			t.Fatalf("an interpreter option before the script: %q", q.Args)
		}
		for i, a := range append([]string{q.Command}, q.Args...) {
			if envRef.MatchString(a) || (i > 0 && assignment.MatchString(a)) {
				t.Fatalf("environment in the argv accepted: %q", a)
			}
		}
	})
}
