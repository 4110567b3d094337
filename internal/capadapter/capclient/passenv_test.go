package capclient

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/capadapter"
)

func TestCheckPassEnv(t *testing.T) {
	many := make([]string, MaxPassEnv+1)
	for i := range many {
		many[i] = fmt.Sprintf("VAR_%d", i)
	}
	cases := []struct {
		name  string
		names []string
		ok    bool
	}{
		{"none", nil, true},
		{"one", []string{"CUPS_SERVER"}, true},
		{"lowercase and underscore", []string{"http_proxy", "_X1"}, true},
		{"sixteen", many[:MaxPassEnv], true},
		{"seventeen", many, false},
		{"empty", []string{""}, false},
		{"digit first", []string{"1X"}, false},
		{"equals sign", []string{"A=B"}, false},
		{"dash", []string{"CUPS-SERVER"}, false},
		{"NUL", []string{"A\x00"}, false},
		{"non-ASCII", []string{"ÄPFEL"}, false},
		{"65 bytes", []string{strings.Repeat("A", 65)}, false},
		{"twice", []string{"CUPS_SERVER", "CUPS_SERVER"}, false},
		{"allowlisted", []string{"PATH"}, false},
		{"allowlisted HOME", []string{"HOME"}, false},
		{"LD_PRELOAD", []string{"LD_PRELOAD"}, false},
		{"LD_LIBRARY_PATH", []string{"LD_LIBRARY_PATH"}, false},
		{"lowercase loader twin", []string{"ld_preload"}, false},
		{"DYLD_INSERT_LIBRARIES", []string{"DYLD_INSERT_LIBRARIES"}, false},
		{"PYTHONPATH", []string{"PYTHONPATH"}, false},
		{"NODE_OPTIONS", []string{"NODE_OPTIONS"}, false},
		{"BASH_ENV", []string{"BASH_ENV"}, false},
		{"CLASSPATH", []string{"CLASSPATH"}, false},
		{"daemon setting", []string{"AIRLOCK_SOCKET"}, false},
		{"one bad among good", []string{"CUPS_SERVER", "PERL5OPT"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckPassEnv(tc.names)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e := wantCode(t, err, capadapter.CodeInvalidRegistration)
			if !strings.HasPrefix(e.Detail, "passEnv: ") {
				t.Errorf("detail %q does not say which field", e.Detail)
			}
		})
	}
	// The refusal of a dangerous name says why.
	if err := CheckPassEnv([]string{"LD_PRELOAD"}); !strings.Contains(err.Error(), "run code other than the approved files") {
		t.Errorf("LD_PRELOAD refused without the reason: %v", err)
	}
}

// TestClientPassEnv: a named variable reaches the child with its value, besides the
// allowlist; an unnamed one does not, and a named one the daemon lacks is simply absent.
func TestClientPassEnv(t *testing.T) {
	noLeaks(t)
	const server = "/run/airlock-test/cups.sock"
	t.Setenv("CUPS_SERVER", server)
	t.Setenv("AIRLOCK_TEST_PROVIDER_SECRET", "sk-do-not-inherit")
	type env struct {
		Names      []string
		CupsServer string
	}
	observe := func(c *Client) env {
		t.Helper()
		raw, err := c.Observe(context.Background(), "test_light")
		if err != nil {
			t.Fatal(err)
		}
		var e env
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	got := observe(startHelper(t, "env", ClientOptions{PassEnv: []string{"CUPS_SERVER", "XTEST_UNSET_VAR_AIRLOCK"}}))
	if got.CupsServer != server || !slices.Contains(got.Names, "CUPS_SERVER") {
		t.Errorf("named CUPS_SERVER not passed: %+v", got)
	}
	for _, n := range got.Names {
		if n != "CUPS_SERVER" && !slices.Contains(envAllowlist, n) {
			t.Errorf("child sees %s, neither allowlisted nor named", n)
		}
	}
	if got := observe(startHelper(t, "env", ClientOptions{})); got.CupsServer != "" || slices.Contains(got.Names, "CUPS_SERVER") {
		t.Errorf("CUPS_SERVER passed without being named: %+v", got)
	}
	// Spawn refuses a name CheckPassEnv refuses, before anything starts.
	reg := helperRegistration(t, "h", "env")
	if _, err := Spawn(reg.Command, reg.Args, ClientOptions{PassEnv: []string{"LD_PRELOAD"}}); capadapter.CodeOf(err) != capadapter.CodeInvalidRegistration {
		t.Fatalf("Spawn with LD_PRELOAD: %v", err)
	}
}

// TestSupervisorPassEnv: the names are part of the registration the supervisor returns and
// shows, the child of every start gets the variables, and a refused name refuses the
// registration before a child starts.
func TestSupervisorPassEnv(t *testing.T) {
	noLeaks(t)
	const server = "/run/airlock-test/cups.sock"
	t.Setenv("CUPS_SERVER", server)
	s := newSupervisor(t, Options{})
	reg := helperRegistration(t, "printer", "env")
	reg.PassEnv = []string{"CUPS_SERVER"}
	got := register(t, s, reg)
	if !slices.Equal(got.PassEnv, []string{"CUPS_SERVER"}) {
		t.Fatalf("normalized registration passes %v", got.PassEnv)
	}
	if st := statusOf(t, s, "printer"); !slices.Equal(st.PassEnv, []string{"CUPS_SERVER"}) {
		t.Fatalf("status shows passEnv %v", st.PassEnv)
	}
	if regs := s.Registrations(); len(regs) != 1 || !slices.Equal(regs[0].PassEnv, []string{"CUPS_SERVER"}) {
		t.Fatalf("registrations %+v", regs)
	}
	raw, err := s.Observe(context.Background(), "test_light")
	if err != nil || !strings.Contains(string(raw), `"cupsServer":"`+server+`"`) {
		t.Fatalf("observe = %s, %v", raw, err)
	}
	// The value is read from the environment, never recorded.
	st, _ := json.Marshal(s.Status())
	rs, _ := json.Marshal(s.Registrations())
	if strings.Contains(string(st)+string(rs), server) {
		t.Fatal("the value of a passed variable shows in status or the registration")
	}

	bad := helperRegistration(t, "preload", "env")
	bad.PassEnv = []string{"LD_PRELOAD"}
	if _, err := s.Register(context.Background(), bad); capadapter.CodeOf(err) != capadapter.CodeInvalidRegistration {
		t.Fatalf("Register with LD_PRELOAD: %v", err)
	}
	if len(s.Status()) != 1 {
		t.Fatalf("a refused registration was installed: %+v", s.Status())
	}
}

// FuzzCheckPassEnv: whatever CheckPassEnv accepts is a set of distinct portable names, none
// allowlisted or refused, each giving the child at most one "NAME=value" entry.
func FuzzCheckPassEnv(f *testing.F) {
	for _, s := range []string{"CUPS_SERVER", "CUPS_SERVER\nHTTP_PROXY", "LD_PRELOAD", "ld_preload", "PATH", "A=B", "", "AIRLOCK_X", "_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, joined string) {
		names := strings.Split(joined, "\n")
		if CheckPassEnv(names) != nil {
			return
		}
		for i, n := range names {
			if !passEnvPattern.MatchString(n) || strings.ContainsAny(n, "=\x00") || slices.Contains(names[:i], n) ||
				slices.Contains(envAllowlist, n) || refusedEnvReason(n) != "" {
				t.Fatalf("accepted %q in %q", n, names)
			}
		}
		if len(names) > MaxPassEnv {
			t.Fatalf("accepted %d names", len(names))
		}
	})
}
