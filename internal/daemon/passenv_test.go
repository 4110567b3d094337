package daemon_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// probeSecret is the value of the variable the daemon passes to the probe adapter; it must
// never leave the daemon's environment but for the child's.
const probeSecret = "probe-value-5e1f9c-not-for-disk"

type capSummary struct {
	CapabilityID      string `json:"capabilityId"`
	Available         bool   `json:"available"`
	UnavailableReason string `json:"unavailableReason"`
}

type adapterState struct {
	Name                    string   `json:"name"`
	State                   string   `json:"state"`
	PID                     int      `json:"pid"`
	PassEnv                 []string `json:"passEnv"`
	UnavailableCapabilities []string `json:"unavailableCapabilities"`
}

func probeCap(t *testing.T, c *client.Client) capSummary {
	t.Helper()
	var list struct {
		Capabilities []capSummary `json:"capabilities"`
	}
	if err := call(t, c, client.Command{Operation: "listCapabilities"}).Decode(&list); err != nil || len(list.Capabilities) != 1 {
		t.Fatalf("listCapabilities: %v %+v", err, list)
	}
	return list.Capabilities[0]
}

func probeStatus(t *testing.T, c *client.Client) (adapterState, string) {
	t.Helper()
	r := call(t, c, client.Command{Operation: "status"})
	var st struct {
		Adapters []adapterState `json:"adapters"`
	}
	if err := r.Decode(&st); err != nil || len(st.Adapters) != 1 {
		t.Fatalf("status: %v %s", err, r.Data)
	}
	return st.Adapters[0], string(r.Data)
}

type probeResult struct {
	Result struct {
		Set    bool `json:"set"`
		Length int  `json:"length"`
	} `json:"result"`
}

func observeProbe(t *testing.T, c *client.Client) (probeResult, string) {
	t.Helper()
	r := call(t, c, client.Command{Operation: "observeCapability", Payload: map[string]any{"capabilityId": "env_probe"}})
	var res probeResult
	if r.OK {
		if err := r.Decode(&res); err != nil {
			t.Fatal(err)
		}
	}
	return res, code(r)
}

// TestBinaryAdapterAvailabilityFollowsCalls: an adapter that starts and lists fine but needs
// a tool the machine lacks answers every observe unavailable; after three, listCapabilities
// and host status show it unavailable (calls_unavailable) while its adapter is ready; calls
// still reach it, and once the tool is there the first result makes it available again.
func TestBinaryAdapterAvailabilityFollowsCalls(t *testing.T) {
	probe := daemontest.Build(t, "./internal/daemon/testdata/envprobe")
	tool := filepath.Join(t.TempDir(), "tool")
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	if r := call(t, c, client.Command{Operation: "registerAdapter", Payload: map[string]any{"name": "probe", "command": probe,
		"args": []string{"PROBE_TOKEN", tool}}}); !r.OK {
		t.Fatal(r.Err())
	}
	if got := probeCap(t, c); !got.Available || got.UnavailableReason != "" {
		t.Fatalf("a new capability: %+v", got)
	}
	for i := range 3 {
		if _, got := observeProbe(t, c); got != "unavailable" {
			t.Fatalf("observe %d without the tool: %q", i+1, got)
		}
		if i < 2 && !probeCap(t, c).Available {
			t.Fatalf("unavailable after %d calls", i+1)
		}
	}
	if got := probeCap(t, c); got.Available || got.UnavailableReason != "calls_unavailable" {
		t.Fatalf("after three unavailable observes: %+v", got)
	}
	st, _ := probeStatus(t, c)
	if st.State != "ready" || !slices.Equal(st.UnavailableCapabilities, []string{"env_probe"}) {
		t.Fatalf("status after three unavailable observes: %+v", st)
	}
	if err := os.WriteFile(tool, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if res, got := observeProbe(t, c); got != "" || res.Result.Set {
		t.Fatalf("observe with the tool: %q %+v", got, res)
	}
	if got := probeCap(t, c); !got.Available || got.UnavailableReason != "" {
		t.Fatalf("after a result: %+v", got)
	}
	if st2, _ := probeStatus(t, c); len(st2.UnavailableCapabilities) != 0 || st2.PID != st.PID {
		t.Fatalf("status after a result: %+v (pid was %d)", st2, st.PID)
	}
}

// TestBinaryAdapterPassEnv: a variable named at registration reaches the adapter from the
// daemon's environment, its name is shown and persisted, and its value is nowhere: not in
// the state file, the daemon's log, status or the adapter list. After a restart the
// registration still names it and the value comes from the new daemon's environment, or is
// absent with it. Names are checked: a malformed one is invalid_field, a refused one
// invalid_registration.
func TestBinaryAdapterPassEnv(t *testing.T) {
	probe := daemontest.Build(t, "./internal/daemon/testdata/envprobe")
	tool := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(tool, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PROBE_TOKEN=" + probeSecret}
	d := daemontest.Start(t, daemontest.Options{Env: env})
	c := d.Dial()
	register := func(passEnv ...string) *client.Response {
		p := map[string]any{"name": "probe", "command": probe, "args": []string{"PROBE_TOKEN", tool}}
		if passEnv != nil {
			p["passEnv"] = passEnv
		}
		return call(t, c, client.Command{Operation: "registerAdapter", Payload: p})
	}
	// Without naming it, the adapter does not see it.
	if r := register(); !r.OK {
		t.Fatal(r.Err())
	}
	if res, got := observeProbe(t, c); got != "" || res.Result.Set {
		t.Fatalf("unnamed variable: %q %+v", got, res)
	}
	refusals := []struct {
		passEnv []string
		code    string
	}{
		{[]string{"LD_PRELOAD"}, "invalid_registration"},
		{[]string{"PYTHONPATH"}, "invalid_registration"},
		{[]string{"AIRLOCK_SOCKET"}, "invalid_registration"},
		{[]string{"PATH"}, "invalid_registration"},
		{[]string{"PROBE_TOKEN=x"}, "invalid_field"},
		{[]string{"PROBE_TOKEN", "PROBE_TOKEN"}, "invalid_field"},
	}
	for _, tc := range refusals {
		if got := code(register(tc.passEnv...)); got != tc.code {
			t.Errorf("passEnv %v: %q, want %s", tc.passEnv, got, tc.code)
		}
	}
	r := register("PROBE_TOKEN")
	var reg struct {
		Adapter adapterState `json:"adapter"`
	}
	if err := r.Decode(&reg); err != nil || !slices.Equal(reg.Adapter.PassEnv, []string{"PROBE_TOKEN"}) {
		t.Fatalf("register with passEnv: %v %s", err, r.Data)
	}
	if res, got := observeProbe(t, c); got != "" || !res.Result.Set || res.Result.Length != len(probeSecret) {
		t.Fatalf("named variable: %q %+v", got, res)
	}
	st, status := probeStatus(t, c)
	list := call(t, c, client.Command{Operation: "listAdapters"})
	if !slices.Equal(st.PassEnv, []string{"PROBE_TOKEN"}) || !strings.Contains(string(list.Data), `"passEnv":["PROBE_TOKEN"]`) {
		t.Fatalf("status %+v, list %s", st, list.Data)
	}

	// Restarted with the variable, the restored registration passes it again.
	d.Stop()
	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, Env: env})
	c2 := d2.Dial()
	waitProbe(t, c2)
	if res, got := observeProbe(t, c2); got != "" || !res.Result.Set || res.Result.Length != len(probeSecret) {
		t.Fatalf("after a restart: %q %+v", got, res)
	}
	// Restarted without it, nothing is passed: the value was never stored.
	d2.Stop()
	d3 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir})
	c3 := d3.Dial()
	waitProbe(t, c3)
	if res, got := observeProbe(t, c3); got != "" || res.Result.Set {
		t.Fatalf("after a restart without the variable: %q %+v", got, res)
	}
	if st, _ := probeStatus(t, c3); !slices.Equal(st.PassEnv, []string{"PROBE_TOKEN"}) {
		t.Fatalf("the restored registration names %v", st.PassEnv)
	}
	d3.Stop()

	db, err := os.ReadFile(filepath.Join(d.StateDir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(db), `"passEnv":["PROBE_TOKEN"]`) {
		t.Fatal("the state file does not record the name")
	}
	for what, text := range map[string]string{"state file": string(db), "status": status, "adapter list": string(list.Data),
		"first daemon's log": d.Stderr(), "second daemon's log": d2.Stderr(), "third daemon's log": d3.Stderr()} {
		if strings.Contains(text, probeSecret) {
			t.Errorf("the passed variable's value is in the %s", what)
		}
	}
}

// waitProbe waits until a restored probe adapter serves env_probe.
func waitProbe(t *testing.T, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var list struct {
			Capabilities []json.RawMessage `json:"capabilities"`
		}
		if err := call(t, c, client.Command{Operation: "listCapabilities"}).Decode(&list); err == nil && len(list.Capabilities) == 1 &&
			probeCap(t, c).Available {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the probe adapter was not restored")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
