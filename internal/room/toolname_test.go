package room

import (
	"regexp"
	"strings"
	"testing"
)

func TestToolName(t *testing.T) {
	p := HostID(strings.Repeat("ab", 32))
	q := HostID(strings.Repeat("cd", 32))
	long := "a" + strings.Repeat("b", 63)
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	cases := []struct {
		name, capability, op string
		provider             HostID
		ambiguous            bool
		want                 string
	}{
		{"plain", "desk_lamp", "set_power", p, false, "room_desk_lamp_set_power"},
		{"observe", "desk_lamp", "observe", p, false, "room_desk_lamp_observe"},
		{"dots and colons", "home.light:1", "set_color", p, false, "room_home_light_1_set_color"},
		{"ambiguous", "desk_lamp", "set_power", p, true, "room_desk_lamp_set_power_abababab"},
		{"ambiguous, other provider", "desk_lamp", "set_power", q, true, "room_desk_lamp_set_power_cdcdcdcd"},
	}
	for _, c := range cases {
		if got := ToolName(c.capability, c.provider, c.op, c.ambiguous); got != c.want {
			t.Errorf("%s: ToolName = %q, want %q", c.name, got, c.want)
		}
	}
	// Too long: a digest of provider and capability stands in for the capability, distinct per
	// provider, stable, and still a valid tool name.
	a, b := ToolName(long, p, "set_power", true), ToolName(long, q, "set_power", true)
	if a == b || a != ToolName(long, p, "set_power", true) || len(a) > MaxToolNameLen || !strings.HasSuffix(a, "_set_power") {
		t.Errorf("long names %q and %q", a, b)
	}
	for _, n := range []string{a, b} {
		if !valid.MatchString(n) {
			t.Errorf("%q is not a valid tool name", n)
		}
	}
}
