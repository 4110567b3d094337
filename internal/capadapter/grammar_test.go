package capadapter

// The protocol package copies the adapter protocol's grammars (it must not import this
// package); this test holds the copies equal.

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/protocol"
)

func TestCapabilityPayloadValidateAgreesWithGrammars(t *testing.T) {
	ids := []string{"a", "0", "living_room_light", "my.url:1", "a-b_c.d:e", strings.Repeat("a", 64), strings.Repeat("a", 65),
		"", "A", "_a", ".a", ":a", "a b", "a/b", "café", "a\n", "a\x00", "a\u2028"}
	for _, id := range ids {
		p := protocol.CapabilityPayload{CapabilityID: id}
		if (p.Validate() == nil) != capabilityIDPattern.MatchString(id) {
			t.Errorf("capability id %q: protocol %v, grammar %v", id, p.Validate(), capabilityIDPattern.MatchString(id))
		}
	}
	actions := []string{"a", "set_led", "set-led", "a0", strings.Repeat("a", 32), strings.Repeat("a", 33),
		"", "0a", "A", "_a", "a.b", "a:b", "a b", "ä", "a\n"}
	for _, a := range actions {
		p := protocol.InvokeCapabilityPayload{CapabilityID: "x", Action: a}
		if (p.Validate() == nil) != actionNamePattern.MatchString(a) {
			t.Errorf("action %q: protocol %v, grammar %v", a, p.Validate(), actionNamePattern.MatchString(a))
		}
	}
	// Args the envelope accepts reach ValidateArgs within its size bound, and the envelope
	// refuses what ValidateArgs would refuse as too large.
	in := Input{Type: "object", Properties: map[string]string{"label": "string"}}
	for _, n := range []int{MaxArgsBytes, MaxArgsBytes + 1} {
		args := json.RawMessage(`{"label":"` + strings.Repeat("a", n-12) + `"}`)
		p := protocol.InvokeCapabilityPayload{CapabilityID: "x", Action: "set", Args: args}
		if (p.Validate() == nil) != (CodeOf(ValidateArgs(in, args)) != CodeTooLarge) {
			t.Errorf("%d-byte args: protocol %v, ValidateArgs %v", len(args), p.Validate(), ValidateArgs(in, args))
		}
	}
}
