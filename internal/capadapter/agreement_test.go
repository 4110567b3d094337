package capadapter

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/protocol"
)

// The protocol package copies the supervisor's registration bounds and the adapter
// protocol's grammars (it must not import this package); these tests hold the copies equal.

func TestProtocolBoundsMatch(t *testing.T) {
	for _, c := range []struct {
		name       string
		proto, own int
	}{
		{"adapter args", protocol.MaxAdapterArgs, MaxAdapterArgs},
		{"arg bytes", protocol.MaxAdapterArgBytes, MaxArgBytes},
		{"registration bytes", protocol.MaxAdapterRegistrationBytes, MaxRegistrationBytes},
		{"action bytes", protocol.MaxCapabilityActionLen, MaxActionBytes},
		{"args bytes", protocol.MaxCapabilityArgsBytes, MaxArgsBytes},
	} {
		if c.proto != c.own {
			t.Errorf("%s: protocol %d, capadapter %d", c.name, c.proto, c.own)
		}
	}
}

func TestRegisterAdapterValidateAgreesWithNormalizeRegistration(t *testing.T) {
	// Commands that resolve, so that only the bounds decide: an absolute path padded with
	// "./" to an exact length, and a bare name found in PATH.
	sh := func(n int) string {
		s := "/" + strings.Repeat("./", (n-7)/2) + "bin/sh"
		if len(s) < n {
			s = strings.Replace(s, "bin/sh", "bin//sh", 1)
		}
		if len(s) != n {
			t.Fatalf("sh(%d) has %d bytes", n, len(s))
		}
		return s
	}
	rep := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = strings.Repeat("a", size)
		}
		return out
	}
	regs := []Registration{
		{Name: "lamp", Command: "/bin/sh"},
		{Name: "lamp", Command: "sh", Args: []string{"-c", "true"}},
		{Name: "a", Command: "/bin/sh"},
		{Name: "0", Command: "/bin/sh"},
		{Name: "lamp-2.a_b", Command: "/bin/sh"},
		{Name: strings.Repeat("a", 64), Command: "/bin/sh"},
		{Name: strings.Repeat("a", 65), Command: "/bin/sh"},
		{Name: "", Command: "/bin/sh"},
		{Name: "Lamp", Command: "/bin/sh"},
		{Name: ".lamp", Command: "/bin/sh"},
		{Name: "_lamp", Command: "/bin/sh"},
		{Name: "la:mp", Command: "/bin/sh"},
		{Name: "la mp", Command: "/bin/sh"},
		{Name: "lämp", Command: "/bin/sh"},
		{Name: "lamp\n", Command: "/bin/sh"},
		{Name: "lamp", Command: ""},
		{Name: "lamp", Command: "   "},
		{Name: "lamp", Command: sh(1024)},
		{Name: "lamp", Command: sh(1025)},
		{Name: "lamp", Command: "/bin/sh\x00"},
		{Name: "lamp", Command: "/bin/sh\xff"},
		{Name: "lamp", Command: "/bin/sh", Args: rep(16, 1)},
		{Name: "lamp", Command: "/bin/sh", Args: rep(17, 1)},
		{Name: "lamp", Command: "/bin/sh", Args: rep(1, 1024)},
		{Name: "lamp", Command: "/bin/sh", Args: rep(1, 1025)},
		{Name: "lamp", Command: "/bin/sh", Args: []string{"a\x00b"}},
		{Name: "lamp", Command: "/bin/sh", Args: []string{"\xff"}},
		{Name: "lamp", Command: "/bin/sh", Args: []string{""}},
		{Name: "lamp", Command: sh(1024), Args: rep(16, 960)}, // exactly 16 KiB
		{Name: "lamp", Command: sh(1024), Args: append(rep(15, 960), strings.Repeat("a", 961))},
		{Name: "lamp", Command: sh(1024), Args: rep(16, 1024)},
	}
	for i, r := range regs {
		_, err := NormalizeRegistration(r)
		if err != nil && CodeOf(err) != CodeInvalidRegistration {
			t.Fatalf("case %d: NormalizeRegistration: %v", i, err)
		}
		p := protocol.RegisterAdapterPayload{Name: r.Name, Command: r.Command, Args: r.Args}
		perr := p.Validate()
		if (err == nil) != (perr == nil) {
			t.Errorf("case %d (name %q, command %d bytes, %d args): NormalizeRegistration %v, protocol Validate %v",
				i, r.Name, len(r.Command), len(r.Args), err, perr)
		}
		n := protocol.AdapterNamePayload{Name: r.Name}
		if (n.Validate() == nil) != adapterNamePattern.MatchString(r.Name) {
			t.Errorf("case %d: AdapterNamePayload.Validate disagrees on name %q", i, r.Name)
		}
	}
}

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
