package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// adapterView is an adapter as listAdapters shows it, the members these tests read.
type adapterView struct {
	Name           string    `json:"name"`
	State          string    `json:"state"`
	PID            int       `json:"pid"`
	LastFailure    string    `json:"lastFailure"`
	Room           string    `json:"room"`
	SessionID      string    `json:"sessionId"`
	Generation     int64     `json:"generation"`
	LeaseExpiresAt time.Time `json:"leaseExpiresAt"`
	Digests        []struct {
		Role     string `json:"role"`
		Path     string `json:"path"`
		Recorded string `json:"recorded"`
		Current  string `json:"current"`
	} `json:"digests"`
}

func listAdapters(t *testing.T, c *client.Client) map[string]adapterView {
	t.Helper()
	var l struct {
		Adapters []adapterView `json:"adapters"`
	}
	if err := call(t, c, client.Command{Operation: "listAdapters"}).Decode(&l); err != nil {
		t.Fatal(err)
	}
	out := map[string]adapterView{}
	for _, a := range l.Adapters {
		out[a.Name] = a
	}
	return out
}

// waitAdapters polls listAdapters until cond holds (20 s at most: the condition is a state,
// not a time).
func waitAdapters(t *testing.T, c *client.Client, what string, cond func(map[string]adapterView) bool) map[string]adapterView {
	t.Helper()
	var last map[string]adapterView
	if !daemontest.WaitFor(20*time.Second, func() bool { last = listAdapters(t, c); return cond(last) }) {
		t.Fatalf("%s: adapters %+v", what, last)
	}
	return last
}

// pythonLight copies examples/adapters/python-light/light.py into a temporary directory, with
// a config naming a bulb nobody serves (the handshake never calls it), and returns the
// registration payload that runs it under python3.
func pythonLight(t *testing.T, name string) (payload map[string]any, script string) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	_, file, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "examples", "adapters", "python-light", "light.py"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script = filepath.Join(dir, "light.py")
	config := filepath.Join(dir, "bulb.json")
	if err := os.WriteFile(script, src, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte(`{"bulb":"http://127.0.0.1:9"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]any{"name": name, "command": python, "args": []string{script, config}}, script
}

func register(t *testing.T, c *client.Client, payload map[string]any) adapterView {
	t.Helper()
	var res struct {
		Adapter adapterView `json:"adapter"`
	}
	r := call(t, c, client.Command{Operation: "registerAdapter", Payload: payload})
	if !r.OK {
		t.Fatalf("register %v: %v", payload["name"], r.Err())
	}
	if err := r.Decode(&res); err != nil {
		t.Fatal(err)
	}
	return res.Adapter
}

// processGone reports whether pid no longer runs (or is a zombie nobody reaped yet).
func processGone(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(st))
	return len(f) > 2 && f[2] == "Z"
}

// A leased adapter stops and its registration disappears when the lease ends: while the
// daemon runs (the supervisor's timer) and when it ended while the daemon was down (at start).
func TestBinaryTemporaryAdapterLease(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: slowAdapterStart})
	c := d.Dial()
	light, _ := pythonLight(t, "light")
	light["leaseSeconds"] = 1
	a := register(t, c, light)
	if a.State != "ready" || a.LeaseExpiresAt.IsZero() || len(a.Digests) != 2 || a.Digests[1].Role != "script" {
		t.Fatalf("registered: %+v", a)
	}
	waitAdapters(t, c, "lease ended", func(m map[string]adapterView) bool { return len(m) == 0 })
	if !daemontest.WaitFor(5*time.Second, func() bool { return processGone(a.PID) }) {
		t.Fatal("the child of an expired adapter still runs")
	}
	if r := call(t, c, client.Command{Operation: "observeCapability", Payload: map[string]any{"capabilityId": "living_room_light"}}); code(r) != "unknown_capability" {
		t.Fatalf("observe after expiry: %s", code(r))
	}

	// A lease that ends while the daemon is down: removed at start, never started.
	light["leaseSeconds"] = 2
	a = register(t, c, light)
	d.Stop()
	for time.Now().Before(a.LeaseExpiresAt) {
		time.Sleep(50 * time.Millisecond)
	}
	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, Args: slowAdapterStart})
	c2 := d2.Dial()
	if !daemontest.WaitFor(20*time.Second, func() bool {
		return strings.Contains(d2.Stderr(), "temporary adapter registration removed at start")
	}) {
		t.Fatalf("the expired registration was not removed at start:\n%s", d2.Stderr())
	}
	if m := listAdapters(t, c2); len(m) != 0 {
		t.Fatalf("after restart: %+v", m)
	}
	d2.Stop()
	d3 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, Args: slowAdapterStart})
	if m := listAdapters(t, d3.Dial()); len(m) != 0 {
		t.Fatalf("the expired registration is still stored: %+v", m)
	}
}

// A session-tied adapter goes when its generation ends: a newer generation opened, or the
// generation closed. A tie to a generation that is not resident is refused.
func TestBinaryTemporaryAdapterSession(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: slowAdapterStart})
	c := d.Dial()
	cwd := t.TempDir()
	if r := call(t, c, client.Command{Operation: "open", SessionID: "s", Generation: gen(1), Payload: openPayload(cwd)}); !r.OK {
		t.Fatal(r.Err())
	}
	light, _ := pythonLight(t, "light")
	light["sessionId"], light["generation"] = "s", 2
	if r := call(t, c, client.Command{Operation: "registerAdapter", Payload: light}); code(r) != "session_not_found" {
		t.Fatalf("tie to a generation not yet open: %s", code(r))
	}
	light["sessionId"], light["generation"] = "nobody", 1
	if r := call(t, c, client.Command{Operation: "registerAdapter", Payload: light}); code(r) != "session_not_found" {
		t.Fatalf("tie to an unknown session: %s", code(r))
	}
	light["sessionId"], light["generation"] = "s", 1
	a := register(t, c, light)
	if a.SessionID != "s" || a.Generation != 1 {
		t.Fatalf("registered: %+v", a)
	}
	// Opening generation 2 ends generation 1.
	if r := call(t, c, client.Command{Operation: "open", SessionID: "s", Generation: gen(2), Payload: openPayload(cwd)}); !r.OK {
		t.Fatal(r.Err())
	}
	if m := listAdapters(t, c); len(m) != 0 {
		t.Fatalf("after a newer generation: %+v", m)
	}
	if !processGone(a.PID) {
		t.Fatal("the child of a removed adapter still runs")
	}
	if r := call(t, c, client.Command{Operation: "registerAdapter", Payload: light}); code(r) != "stale_generation" {
		t.Fatalf("tie to an ended generation: %s", code(r))
	}
	// Closing generation 2 ends it.
	light["generation"] = 2
	a = register(t, c, light)
	if r := call(t, c, client.Command{Operation: "close", SessionID: "s", Generation: gen(2), Payload: map[string]any{"retainSession": true}}); !r.OK {
		t.Fatal(r.Err())
	}
	if m := listAdapters(t, c); len(m) != 0 {
		t.Fatalf("after close: %+v", m)
	}
	if !processGone(a.PID) {
		t.Fatal("the child of a removed adapter still runs")
	}
	d.Stop()
	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, Args: slowAdapterStart})
	if m := listAdapters(t, d2.Dial()); len(m) != 0 {
		t.Fatalf("a removed session adapter is still stored: %+v", m)
	}
}

// A changed script is refused with adapter_changed on the crash-restart path, at
// re-register and at daemon start, until approveAdapter, after which it runs and stays
// approved across a restart; the audit journal records each step.
func TestBinaryChangedAdapterNeedsApproval(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: slowAdapterStart})
	c := d.Dial()
	light, script := pythonLight(t, "light")
	a := register(t, c, light)
	recorded := a.Digests[1].Recorded

	f, err := os.OpenFile(script, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\n# swapped after approval\n")
	f.Close()
	// The child crashes: the supervisor would restart it, but the script changed.
	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m := waitAdapters(t, c, "changed after a crash", func(m map[string]adapterView) bool { return m["light"].State == "changed" })
	got := m["light"]
	if got.LastFailure != "adapter_changed" || got.PID != 0 || got.Digests[1].Recorded != recorded ||
		got.Digests[1].Current == "" || got.Digests[1].Current == recorded || got.Digests[0].Current != "" {
		t.Fatalf("changed: %+v", got)
	}
	if r := call(t, c, client.Command{Operation: "observeCapability", Payload: map[string]any{"capabilityId": "living_room_light"}}); code(r) != "unavailable" {
		t.Fatalf("observe while changed: %s", code(r))
	}
	if r := call(t, c, client.Command{Operation: "registerAdapter", Payload: light}); code(r) != "adapter_changed" {
		t.Fatalf("re-register: %s", code(r))
	}

	// At daemon start it is not started either.
	d.Stop()
	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, Args: slowAdapterStart})
	c2 := d2.Dial()
	waitAdapters(t, c2, "changed at start", func(m map[string]adapterView) bool {
		return m["light"].State == "changed" && m["light"].LastFailure == "adapter_changed"
	})
	if strings.Contains(d2.Stderr(), "swapped after approval") {
		t.Fatal("the daemon log quotes the script")
	}

	var ap struct {
		Adapter   adapterView `json:"adapter"`
		Restarted bool        `json:"restarted"`
		Digests   []struct {
			Role string `json:"role"`
			Old  string `json:"old"`
			New  string `json:"new"`
		} `json:"digests"`
	}
	r := call(t, c2, client.Command{Operation: "approveAdapter", Payload: map[string]any{"name": "light"}})
	if err := r.Decode(&ap); err != nil {
		t.Fatal(err)
	}
	if !ap.Restarted || ap.Adapter.State != "ready" || len(ap.Digests) != 2 || !strings.HasPrefix(ap.Digests[1].Old, recorded) ||
		ap.Digests[1].New == ap.Digests[1].Old || ap.Digests[0].Old != ap.Digests[0].New {
		t.Fatalf("approve: %+v", ap)
	}
	if r := call(t, c2, client.Command{Operation: "observeCapability", Payload: map[string]any{"capabilityId": "living_room_light"}}); code(r) == "adapter_changed" {
		t.Fatalf("observe after approve: %s", code(r))
	}
	if r := call(t, c2, client.Command{Operation: "approveAdapter", Payload: map[string]any{"name": "nobody"}}); code(r) != "unknown_adapter" {
		t.Fatalf("approve unknown: %s", code(r))
	}
	d2.Stop()
	d3 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, Args: slowAdapterStart})
	waitAdapters(t, d3.Dial(), "approved digests persisted", func(m map[string]adapterView) bool { return m["light"].State == "ready" })

	// The journal has the adapter's story: registered, found changed (after the crash and at
	// the second start), its re-register refused, approved (replacing the changed one).
	var story []string
	for _, r := range journalRecords(t, d.StateDir) {
		if r.Kind == audit.KindEvent && r.Target.Adapter == "light" {
			story = append(story, r.Target.Op+":"+r.Outcome)
		}
	}
	want := "adapter.register:ok adapter.changed:adapter_changed adapter.register:adapter_changed adapter.changed:adapter_changed adapter.remove:replaced adapter.approve:ok"
	if strings.Join(story, " ") != want {
		t.Fatalf("the journal's adapter events:\n%s\nwant\n%s", strings.Join(story, " "), want)
	}
}

// A registration stored before digests existed (state schema 3, a version 1 record) is
// migrated at start and gets its digests recorded at its first start, durably.
func TestBinaryLegacyRegistrationGetsDigests(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	d := daemontest.Start(t, daemontest.Options{Args: slowAdapterStart})
	register(t, d.Dial(), map[string]any{"name": "lamp", "command": lamp})
	d.Stop()
	db, err := bolt.Open(filepath.Join(d.StateDir, "airlock.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("meta")).Put([]byte("schemaVersion"), []byte("3")); err != nil {
			return err
		}
		return tx.Bucket([]byte("registrations")).Put([]byte("lamp"), []byte(`{"name":"lamp","command":"`+lamp+`","args":[]}`))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, Args: slowAdapterStart})
	m := waitAdapters(t, d2.Dial(), "legacy restored", func(m map[string]adapterView) bool { return m["lamp"].State == "ready" })
	if len(m["lamp"].Digests) != 1 || m["lamp"].Digests[0].Role != "executable" {
		t.Fatalf("legacy registration: %+v", m["lamp"])
	}
	d2.Stop()
	db, err = bolt.Open(filepath.Join(d.StateDir, "airlock.db"), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bolt.Tx) error {
		raw := string(tx.Bucket([]byte("registrations")).Get([]byte("lamp")))
		if !strings.Contains(raw, `"version":2`) || !strings.Contains(raw, `"sha256":"`) {
			t.Errorf("stored after the first start: %s", raw)
		}
		return nil
	})
}

// slowAdapterStart gives the Python adapters these tests start time to come up on a loaded
// machine (a race build beside other test binaries): the default start deadline is 1.5 s.
var slowAdapterStart = []string{"--adapter-start-timeout", "10s"}
