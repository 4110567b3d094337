package capclient

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/protocol"
)

func TestProtocolBoundsMatch(t *testing.T) {
	for _, c := range []struct {
		name       string
		proto, own int
	}{
		{"adapter args", protocol.MaxAdapterArgs, MaxAdapterArgs},
		{"arg bytes", protocol.MaxAdapterArgBytes, MaxArgBytes},
		{"registration bytes", protocol.MaxAdapterRegistrationBytes, MaxRegistrationBytes},
		{"action bytes", protocol.MaxCapabilityActionLen, capadapter.MaxActionBytes},
		{"args bytes", protocol.MaxCapabilityArgsBytes, capadapter.MaxArgsBytes},
		{"passEnv names", protocol.MaxAdapterPassEnv, MaxPassEnv},
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
		{Name: "lamp", Command: "/bin/sh", PassEnv: []string{"CUPS_SERVER", "http_proxy", "_A1"}},
		{Name: "lamp", Command: "/bin/sh", PassEnv: []string{strings.Repeat("A", 64)}},
		{Name: "lamp", Command: "/bin/sh", PassEnv: []string{strings.Repeat("A", 65)}},
		{Name: "lamp", Command: "/bin/sh", PassEnv: []string{""}},
		{Name: "lamp", Command: "/bin/sh", PassEnv: []string{"1A"}},
		{Name: "lamp", Command: "/bin/sh", PassEnv: []string{"A=B"}},
		{Name: "lamp", Command: "/bin/sh", PassEnv: []string{"CUPS_SERVER", "CUPS_SERVER"}},
		{Name: "lamp", Command: "/bin/sh", PassEnv: rep(17, 1)},
	}
	for i, r := range regs {
		_, err := NormalizeRegistration(r)
		if err != nil && capadapter.CodeOf(err) != capadapter.CodeInvalidRegistration {
			t.Fatalf("case %d: NormalizeRegistration: %v", i, err)
		}
		p := protocol.RegisterAdapterPayload{Name: r.Name, Command: r.Command, Args: r.Args, PassEnv: r.PassEnv}
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

// TestPassEnvRefusalsAreTheSupervisors: the names the envelope accepts but the supervisor
// refuses (already passed to every adapter, or a loader or interpreter's code path) are
// invalid_registration, not invalid_field: the list is the supervisor's alone.
func TestPassEnvRefusalsAreTheSupervisors(t *testing.T) {
	for _, n := range []string{"PATH", "LD_PRELOAD", "PYTHONPATH", "AIRLOCK_SOCKET"} {
		p := protocol.RegisterAdapterPayload{Name: "lamp", Command: "/bin/sh", PassEnv: []string{n}}
		if e := p.Validate(); e != nil {
			t.Errorf("%s: protocol Validate %v", n, e)
		}
		_, err := NormalizeRegistration(Registration{Name: "lamp", Command: "/bin/sh", PassEnv: []string{n}})
		if capadapter.CodeOf(err) != capadapter.CodeInvalidRegistration {
			t.Errorf("%s: NormalizeRegistration %v", n, err)
		}
	}
}

// The reasons a capability is shown unavailable are the rooms' own words for them.
func TestUnavailableReasonsMatchRooms(t *testing.T) {
	if UnavailableNotReady != protocol.RoomUnavailableAdapterNotReady || UnavailableCalls != protocol.RoomUnavailableCallsUnavailable {
		t.Fatalf("capclient %q, %q; protocol %q, %q", UnavailableNotReady, UnavailableCalls,
			protocol.RoomUnavailableAdapterNotReady, protocol.RoomUnavailableCallsUnavailable)
	}
}
