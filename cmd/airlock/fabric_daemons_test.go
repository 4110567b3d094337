package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nkeys"

	"github.com/airlockhq/airlock/internal/browsertest"
	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/room"
)

// fabricNodeIPs are the three nodes' addresses: one machine, three loopback addresses.
var fabricNodeIPs = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}

// fabricTestPorts finds a client and a route port free on all three addresses. Where the
// addresses cannot be bound the test is skipped, except under CI=true, which must run it.
func fabricTestPorts(t *testing.T) [2]int {
	t.Helper()
	var out [2]int
	for i := range out {
		for range 50 {
			l, err := net.Listen("tcp", fabricNodeIPs[0]+":0")
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("cannot listen on %s: %v", fabricNodeIPs[0], err)
				}
				t.Skipf("cannot listen on %s: %v", fabricNodeIPs[0], err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			ls, ok := []net.Listener{l}, true
			for _, ip := range fabricNodeIPs[1:] {
				l2, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
				if err != nil {
					ok = false
					break
				}
				ls = append(ls, l2)
			}
			for _, l := range ls {
				_ = l.Close()
			}
			if ok && (i == 0 || port != out[0]) {
				out[i] = port
				break
			}
		}
		if out[i] == 0 {
			t.Fatal("no port free on all three addresses")
		}
	}
	return out
}

// fabricDaemon is one airlockd of the three-machine test: its state directory (with a host
// key made before its fabric was written), socket and fabric file.
type fabricDaemon struct {
	name   string
	state  string
	socket string
	fabric string
	id     string
	args   []string // more airlockd flags: B's model provider, C's --http
	h      *roomHost
}

func (fd *fabricDaemon) start(t *testing.T) {
	t.Helper()
	d := daemontest.Start(t, daemontest.Options{StateDir: fd.state, Socket: fd.socket,
		Args: append([]string{"--adapter-start-timeout", "10s", "--fabric", fd.fabric}, fd.args...)})
	fd.h = &roomHost{t: t, d: d}
}

// waitRooms waits until the daemon's room service runs: it waits for a JetStream leader,
// that is for a second node of the fabric.
func (fd *fabricDaemon) waitRooms(t *testing.T) {
	t.Helper()
	waitFor(t, fd.name+"'s room service on the fabric", func() bool {
		var out, errb bytes.Buffer
		return run(context.Background(), []string{"--socket", fd.socket, "room", "status"}, strings.NewReader(""), &out, &errb) == exitOK
	})
}

// outsider is a host with a broker user on A's node, connected from outside through A's TLS
// client listener.
type outsider struct {
	key  *room.HostKey
	seed nkeys.KeyPair
	conn *bus.Conn
}

func newOutsider(t *testing.T) *outsider {
	t.Helper()
	k, err := room.GenerateHostKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	return &outsider{key: k, seed: seed}
}

func (o *outsider) dial(t *testing.T, url string, ca *x509.CertPool) {
	t.Helper()
	c, err := bus.Dial(bus.DialConfig{URL: url, Name: string(o.key.ID()), InboxPrefix: bus.InboxPrefix(string(o.key.ID())),
		Nkey: o.seed, TLS: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	o.conn = c
}

// TestFabricThreeDaemons runs three real airlockd, each with its own fabric file written by
// airlock fabric init, as the three nodes of a TLS cluster on 127.0.0.2–4: A creates a room
// and provides the Go lamp, B and C join with join codes and invoke it through their own
// sockets; C's human runs set_power from the generated form of C's page (airlockd --http) in
// headless Chromium, and B's agent (a session opened with --room, a scripted model) calls the
// lamp's room tool, which runs at A; fabric status shows the routes and JetStream's leader; a
// host with broker access to A's node but no room is refused at the broker, and one whose
// broker user has the room but who is not on the roster reaches A's provider, which refuses it
// and runs nothing. Then, each under a bounded load of 1,000 invokes from B: B's airlockd is
// killed (SIGKILL) and restarted on its state directory; C's airlockd, which embeds the third
// NATS node, is killed and restarted; A's is stopped for 5 s. The load's acknowledged results,
// typed failures and the lamp's effects are counted.
func TestFabricThreeDaemons(t *testing.T) {
	ports := fabricTestPorts(t)
	chromium := browsertest.Chromium(t)
	llm := modeltest.New() // B's model: outside airlock, a test double is enough
	t.Cleanup(llm.Close)
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	root := daemontest.ShortDir(t)
	top := filepath.Join(root, "fabric")
	var ds []*fabricDaemon
	args := []string{"fabric", "init", "--dir", top, "--cluster", "home", "--client-port", strconv.Itoa(ports[0]),
		"--route-port", strconv.Itoa(ports[1])}
	for i, name := range []string{"a", "b", "c"} {
		state := filepath.Join(root, name)
		if err := os.MkdirAll(state, 0o700); err != nil {
			t.Fatal(err)
		}
		// The host key is the daemon's identity (host.key in its state directory); it is
		// made here, before the fabric, as a first run of the daemon would.
		k, _, err := room.LoadOrCreateHostKey(state)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, &fabricDaemon{name: name, state: state, socket: filepath.Join(root, name+".sock"),
			fabric: filepath.Join(top, name, "fabric.json"), id: string(k.ID())})
		args = append(args, "--node", name+"="+fabricNodeIPs[i], "--host", name+"="+string(k.ID()))
	}
	cli(t, "/nonexistent.sock", "", args...).wantCode(t, exitOK)
	ds[1].args = []string{"--provider", "local=" + llm.URL()}
	ds[2].args = []string{"--http", "127.0.0.1:0"}

	// Two outsiders get broker users on A's node: one with no room, one whose user lists
	// the room (its node's operator let it in) although the room's owner never did.
	none, listed := newOutsider(t), newOutsider(t)
	edit := func(path string, f func(*bus.FabricFile)) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ff, err := bus.ParseFabric(data)
		if err != nil {
			t.Fatal(err)
		}
		f(ff)
		data, _ = json.Marshal(ff)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	edit(ds[0].fabric, func(f *bus.FabricFile) {
		for _, o := range []*outsider{none, listed} {
			pub, _ := o.seed.PublicKey()
			u := bus.FabricUser{Host: string(o.key.ID()), Nkey: pub}
			if o == listed {
				u.Rooms = []string{"home"}
			}
			f.Users = append(f.Users, u)
		}
	})

	var wg sync.WaitGroup
	for _, fd := range ds {
		fd.start(t)
	}
	for _, fd := range ds {
		wg.Go(func() { fd.waitRooms(t) })
	}
	wg.Wait()
	a, b, c := ds[0].h, ds[1].h, ds[2].h

	var st bus.FabricStatus
	waitFor(t, "A's node routed to both peers with a JetStream leader", func() bool {
		a.data(&st, "fabric", "status")
		return len(st.Routes) == 2 && st.JetStream.Leader != ""
	})
	if st.Mode != bus.ModeCluster || st.Node != "a" || st.Cluster != "home" || !strings.HasPrefix(st.ClientURL, "tls://127.0.0.2:") ||
		st.Certificate == nil || st.Certificate.NotAfter.Before(time.Now().AddDate(1, 11, 0)) || st.Certificate.CANotAfter.Before(st.Certificate.NotAfter) {
		t.Fatalf("A's fabric status: %+v", st)
	}
	if text := a.cli("", "fabric", "status").wantCode(t, exitOK).stdout; !strings.Contains(text, "node a (cluster), cluster home") ||
		!strings.Contains(text, "route  b") || !strings.Contains(text, "jetstream: leader") || !strings.Contains(text, "certificate: valid until ") {
		t.Fatalf("fabric status text:\n%s", text)
	}
	var rs roomStatusData
	b.data(&rs, "room", "status")
	if rs.HostID != ds[1].id || !rs.Embedded || !strings.HasPrefix(rs.NATSURL, "tls://127.0.0.3:") {
		t.Fatalf("B's room status %+v", rs)
	}

	// The room: A owns it and provides the lamp; B and C join with join codes.
	a.cli("", "adapter", "register", "lamp", "--", "/bin/sh", "-c", loggedAdapter(filepath.Join(root, "effects.log"), lamp)).wantCode(t, exitOK)
	a.cli("", "room", "create", "home", "--title", "Home").wantCode(t, exitOK)
	for _, m := range []*roomHost{b, c} {
		var inv struct {
			Code string `json:"code"`
		}
		a.data(&inv, "room", "invite", "home")
		m.cli(inv.Code+"\n", "room", "join", "-").wantCode(t, exitOK)
	}
	a.cli("", "room", "publish", "--room", "home", "--cap", "desk_lamp", "--actions", "set_power", "--observe").wantCode(t, exitOK)
	for _, m := range []*roomHost{b, c} {
		waitFor(t, "the lamp visible to a member", func() bool {
			var caps struct {
				Capabilities []roomCapData `json:"capabilities"`
			}
			m.data(&caps, "room", "caps", "--room", "home")
			return described(caps.Capabilities, 1)
		})
	}
	var call struct {
		Provider string `json:"provider"`
		Result   struct {
			On bool `json:"on"`
		} `json:"result"`
	}
	b.data(&call, "room", "invoke", "--room", "home", "--cap", "desk_lamp", "--action", "set_power", "--args", `{"on":true}`)
	if call.Provider != ds[0].id || !call.Result.On {
		t.Fatalf("B's invoke across the fabric: %+v", call)
	}
	c.data(&call, "room", "invoke", "--room", "home", "--cap", "desk_lamp", "--action", "set_power", "--args", `{"on":false}`)
	if call.Result.On {
		t.Fatalf("C's invoke across the fabric: %+v", call)
	}
	c.data(&call, "room", "observe", "--room", "home", "--cap", "desk_lamp")
	effects := func() int {
		data, _ := os.ReadFile(filepath.Join(root, "effects.log"))
		return strings.Count(string(data), `"method":"invoke"`)
	}
	if n := effects(); n != 2 {
		t.Fatalf("the lamp ran %d invokes, want 2", n)
	}
	humanAndAgent(t, chromium, ds, llm)
	if n := effects(); n != 4 {
		t.Fatalf("the lamp ran %d invokes after C's human and B's agent, want 4", n)
	}

	// Broker access without membership.
	caPEM, err := os.ReadFile(filepath.Join(top, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	ca := x509.NewCertPool()
	ca.AppendCertsFromPEM(caPEM)
	aURL := "nats://" + net.JoinHostPort(fabricNodeIPs[0], strconv.Itoa(ports[0]))
	none.dial(t, aURL, ca)
	listed.dial(t, aURL, ca)
	subject := room.CallSubject("home", room.HostID(ds[0].id))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := none.conn.Request(ctx, subject, []byte(`{}`)); err == nil {
		t.Fatal("a host without membership got an answer from A's provider")
	}
	waitFor(t, "the broker's refusal of the call", func() bool { return none.conn.Refusals() > 0 })
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	// A malformed call: the provider refuses it in header fields alone (wire v3).
	reply, err := listed.conn.RequestMsg(ctx2, subject, busport.Msg{Data: []byte(`{}`)})
	if err != nil || len(reply.Header["code"]) != 1 || reply.Header["code"][0] != "invalid_request" {
		t.Fatalf("the listed outsider's call: %+v %v", reply, err)
	}
	if n := effects(); n != 4 {
		t.Fatalf("the lamp ran %d invokes after the outsiders, want 4", n)
	}

	// kill -9 of B's airlockd, restarted at once on its state directory.
	fabricLoad(t, "kill -9 of B's airlockd", ds, filepath.Join(root, "effects.log"), effects, 1000, func() {
		ds[1].h.d.Kill9()
		ds[1].start(t) // the load meets B's socket gone, then its room service starting
	})
	// kill -9 of C's airlockd, whose node is neither A's nor B's; restarted after 2 s.
	fabricLoad(t, "kill -9 of C's airlockd (a third node)", ds, filepath.Join(root, "effects.log"), effects, 1000, func() {
		ds[2].h.d.Kill9()
		time.Sleep(2 * time.Second)
		ds[2].start(t)
	})
	// The restarted C is back in the room: its room service rejoined and its call goes through.
	ds[2].waitRooms(t)
	var back struct {
		Provider string `json:"provider"`
	}
	ds[2].h.data(&back, "room", "invoke", "--room", "home", "--cap", "desk_lamp", "--action", "set_power", "--args", `{"on":true}`)
	// A partitioned for 5 s: its airlockd (node and provider) stopped with SIGSTOP.
	fabricLoad(t, "A stopped for 5 s", ds, filepath.Join(root, "effects.log"), effects, 1000, func() {
		ds[0].h.d.Signal(syscall.SIGSTOP)
		time.Sleep(5 * time.Second)
		ds[0].h.d.Signal(syscall.SIGCONT)
	})
	// The three stop together rather than one after another in the cleanups, where the last,
	// alone on the fabric, waited out each JetStream write of its shutdown (16 s in all).
	var stop sync.WaitGroup
	for _, fd := range ds {
		stop.Go(fd.h.d.Stop)
	}
	stop.Wait()
}

// humanAndAgent has C's human and B's agent invoke A's lamp, which C's CLI left off. C's
// human logs in to C's page with the URL open-ui printed and turns the lamp on from the
// set_power form, in headless Chromium; the page shows the result and the call in its live
// log, and a screenshot is saved. B's agent, a session opened with --room home on B's scripted
// model, calls the lamp's room tool to turn it off; the call runs at A, the model reads A's
// answer, and B's session events show the room call start and end. Each is one invoke of the
// lamp.
func humanAndAgent(t *testing.T, chromium string, ds []*fabricDaemon, llm *modeltest.Server) {
	t.Helper()
	a, b, c := ds[0].h, ds[1].h, ds[2].h
	lampOn := func() bool {
		t.Helper()
		var obs struct {
			Result struct {
				On bool `json:"on"`
			} `json:"result"`
		}
		a.data(&obs, "cap", "observe", "--id", "desk_lamp")
		return obs.Result.On
	}

	page := openRoomPage(t, chromium, c)
	page.logIn("home")
	page.runAction("desk_lamp", "set_power", "on", func(form string) []chromedp.Action[chromedp.Void] {
		return []chromedp.Action[chromedp.Void]{chromedp.Click(chromedp.CSS(form + ` input[name="on"]`))}
	}, `r.on === true`)
	page.screenshot("fabric-three-daemons.png")
	for _, m := range page.consoleMessages() {
		if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
			t.Errorf("browser console: %s", m)
		}
	}
	page.Close() // not kept through the loads
	if !lampOn() {
		t.Fatal("A's lamp is off after C's page turned it on")
	}

	tool := room.ToolName("desk_lamp", room.HostID(ds[0].id), "set_power", false)
	b.cli("", "session", "open", "agent", "--generation", "1", "--cwd", t.TempDir(), "--model", "local/m", "--room", "home").wantCode(t, exitOK)
	events := startAttach(t, ds[1].socket, "agent", "--generation", "1")
	waitFor(t, "the attach to B's agent", func() bool { return strings.Contains(events.stderr.String(), "attached agent") })
	llm.Push(modeltest.Reply{ToolCalls: []model.ToolCall{{ID: "call_0", Name: tool, Arguments: `{"on":false}`}}},
		modeltest.Reply{Text: "The lamp is off."})
	r := b.cli("", "wake", "agent", "turn the desk lamp off", "--generation", "1", "--key", "k1").wantCode(t, exitOK)
	if r.stdout != "The lamp is off.\n" || !strings.Contains(r.stderr, "-> room.invoke") || strings.Contains(r.stderr, "failed") {
		t.Fatalf("B's agent turn:\n%s\n%s", r.stdout, r.stderr)
	}
	reqs := llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("B's agent made %d model calls, want 2", len(reqs))
	}
	var offered []string
	for _, tl := range reqs[0].Request.Tools {
		offered = append(offered, tl.Name)
	}
	if !slices.Contains(offered, tool) {
		t.Fatalf("B's agent was offered %v, not %s", offered, tool)
	}
	msgs := reqs[1].Request.Messages
	if last := msgs[len(msgs)-1]; last.Role != model.RoleTool || !strings.Contains(last.Content, `"on":false`) {
		t.Fatalf("the tool output B's model read: %+v", last)
	}
	if lampOn() {
		t.Fatal("A's lamp is on after B's agent turned it off")
	}

	type toolEvent struct {
		Event string `json:"event"`
		Data  struct {
			Name      string `json:"name"`
			Operation string `json:"operation"`
			OK        bool   `json:"ok"`
			Room      struct {
				Provider string `json:"provider"`
				Action   string `json:"action"`
			} `json:"room"`
		} `json:"data"`
	}
	var start, end *toolEvent
	waitFor(t, "B's agent's toolEnd event", func() bool {
		for line := range strings.Lines(events.stdout.String()) {
			var ev toolEvent
			if json.Unmarshal([]byte(line), &ev) != nil {
				continue
			}
			switch ev.Event {
			case "toolStart":
				start = &ev
			case "toolEnd":
				end = &ev
			}
		}
		return end != nil
	})
	if start == nil || start.Data.Name != tool || start.Data.Operation != "room.invoke" {
		t.Fatalf("B's toolStart: %+v", start)
	}
	if !end.Data.OK || end.Data.Operation != "room.invoke" || end.Data.Room.Provider != ds[0].id || end.Data.Room.Action != "set_power" {
		t.Fatalf("B's toolEnd: %+v", end)
	}
	events.cancel()
	if code := events.wait(t); code != exitOK {
		t.Fatalf("attach exit %d: %s", code, events.stderr.String())
	}
}

// loadPace is the least time between two invokes of fabricLoad. An acknowledged invoke
// through B's socket takes longer than this under -race on the shared machine (each is a
// CLI run: dial, handshake, a room call across the fabric), so the pace mostly spaces the
// failures that come at once, while B's socket is gone; 1,000 invokes still span each
// disruption (the test fails if a load ends before its disruption does).
const loadPace = 5 * time.Millisecond

// fabricLoad runs a load of invokes from B (one at a time through B's socket, at most one
// every loadPace, each a new room call to A's lamp) until n are acknowledged, within two
// minutes, and disrupts the fabric once n/3 are, while the load goes on: disrupt returns when
// the disruption is over (the process restarted, resumed), and a result must follow. Every
// attempt either is acknowledged (a result) or fails with a typed error; each attempt runs
// the lamp at most once, so the lamp's effects lie between the acknowledged results (none
// lost) and the attempts (none duplicated). Recovery is from the end of the disruption to the
// first result after it.
func fabricLoad(t *testing.T, what string, ds []*fabricDaemon, effectsLog string, effects func() int, n int, disrupt func()) {
	t.Helper()
	before := effects()
	b := ds[1]
	var acked, attempts int
	codes := map[string]int{}
	var mu sync.Mutex
	var disrupted, over, recovered, lastAck time.Time
	var longest time.Duration
	done := make(chan struct{})
	began := time.Now()
	deadline := began.Add(2 * time.Minute)
	var next time.Time
	for acked < n && time.Now().Before(deadline) {
		if acked == n/3 && disrupted.IsZero() {
			disrupted = time.Now()
			go func() {
				defer close(done)
				disrupt()
				mu.Lock()
				over = time.Now()
				mu.Unlock()
			}()
		}
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		}
		next = time.Now().Add(loadPace)
		attempts++
		r := cli(t, b.socket, "", "room", "invoke", "--room", "home", "--cap", "desk_lamp", "--action", "set_power",
			"--args", `{"on":`+strconv.FormatBool(attempts%2 == 0)+`}`, "--json")
		if r.code == exitOK {
			acked++
			now := time.Now()
			if !lastAck.IsZero() && now.Sub(lastAck) > longest {
				longest = now.Sub(lastAck)
			}
			lastAck = now
			mu.Lock()
			if !over.IsZero() && recovered.IsZero() {
				recovered = now
			}
			mu.Unlock()
			continue
		}
		var env jsonEnvelope
		if err := json.Unmarshal([]byte(r.stdout), &env); err != nil || env.Error.Code == "" {
			t.Fatalf("%s: attempt %d: an untyped failure: exit %d %q %q", what, attempts, r.code, r.stdout, r.stderr)
		}
		codes[env.Error.Code]++
	}
	if !disrupted.IsZero() {
		<-done
	}
	took := time.Since(began)
	ran := effects() - before
	t.Logf("%s: %d attempts from B in %v, %d acknowledged, %d typed failures %v, lamp ran %d "+
		"(lost acknowledged %d, duplicated %d); disruption %v, first result %v after its end, longest gap between results %v",
		what, attempts, took.Round(100*time.Millisecond), acked, attempts-acked, codes, ran, max(0, acked-ran), max(0, ran-attempts),
		over.Sub(disrupted).Round(time.Millisecond), recovered.Sub(over).Round(time.Millisecond), longest.Round(time.Millisecond))
	if acked < n {
		t.Fatalf("%s: %d of %d invokes acknowledged within two minutes", what, acked, n)
	}
	if recovered.IsZero() {
		t.Fatalf("%s: the load of %d ended before the disruption did; it proves nothing about recovery", what, n)
	}
	if ran < acked || ran > attempts {
		data, _ := os.ReadFile(effectsLog)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		t.Fatalf("%s: the lamp ran %d invokes for %d acknowledged of %d attempts; its last requests:\n%s", what, ran, acked, attempts,
			strings.Join(lines[max(0, len(lines)-8):], "\n"))
	}
}

// TestFabricStatusWhileTheFabricForms starts one airlockd of a three-node fabric alone: its
// room service waits for a JetStream leader that cannot come, and meanwhile airlock fabric
// status shows the node (no route, no leader), the status an operator needs to see why,
// while the room operations answer unavailable saying that the service waits for the fabric.
func TestFabricStatusWhileTheFabricForms(t *testing.T) {
	ports := fabricTestPorts(t)
	root := daemontest.ShortDir(t)
	top := filepath.Join(root, "fabric")
	args := []string{"fabric", "init", "--dir", top, "--cluster", "home", "--client-port", strconv.Itoa(ports[0]),
		"--route-port", strconv.Itoa(ports[1])}
	var a *fabricDaemon
	for i, name := range []string{"a", "b", "c"} {
		state := filepath.Join(root, name)
		if err := os.MkdirAll(state, 0o700); err != nil {
			t.Fatal(err)
		}
		k, _, err := room.LoadOrCreateHostKey(state)
		if err != nil {
			t.Fatal(err)
		}
		if a == nil {
			a = &fabricDaemon{name: name, state: state, socket: filepath.Join(root, name+".sock"),
				fabric: filepath.Join(top, name, "fabric.json"), id: string(k.ID())}
		}
		args = append(args, "--node", name+"="+fabricNodeIPs[i], "--host", name+"="+string(k.ID()))
	}
	cli(t, "/nonexistent.sock", "", args...).wantCode(t, exitOK)
	a.start(t)
	a.h.d.WaitReady()

	var st bus.FabricStatus
	waitFor(t, "fabric status of the node waiting for its peers", func() bool {
		return cli(t, a.socket, "", "fabric", "status").code == exitOK
	})
	a.h.data(&st, "fabric", "status")
	if st.Node != "a" || st.Mode != bus.ModeCluster || len(st.Routes) != 0 || st.JetStream.Leader != "" {
		t.Fatalf("fabric status: %+v", st)
	}
	if text := a.h.cli("", "fabric", "status").stdout; !strings.Contains(text, "jetstream: NO LEADER") {
		t.Fatalf("fabric status text:\n%s", text)
	}
	a.h.refused(room.CodeUnavailable, "room", "status")
	if r := a.h.cli("", "room", "list"); !strings.Contains(r.stderr, "waits for a JetStream leader") {
		t.Fatalf("room list while the fabric forms: %s", r.stderr)
	}
}

// TestRoomsSayWhyTheyDidNotStart starts airlockd with a fabric file written for another host:
// the room service does not start (fabric_host), and the room operations say so, where they
// said only that the service was not running and the reason was in the log alone.
func TestRoomsSayWhyTheyDidNotStart(t *testing.T) {
	t.Parallel()
	root := daemontest.ShortDir(t)
	top := filepath.Join(root, "fabric")
	other := strings.Repeat("ab", 32)
	cli(t, "/nonexistent.sock", "", "fabric", "init", "--dir", top, "--node", "a=127.0.0.2", "--host", "a="+other).wantCode(t, exitOK)
	state := filepath.Join(root, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	fd := &fabricDaemon{name: "a", state: state, socket: filepath.Join(root, "a.sock"), fabric: filepath.Join(top, "a", "fabric.json")}
	fd.start(t)
	fd.h.d.WaitStderr("the room service's failure", regexp.MustCompile("room service not started"))
	fd.h.refused(room.CodeUnavailable, "room", "status")
	r := fd.h.cli("", "room", "list")
	if !strings.Contains(r.stderr, "did not start") || !strings.Contains(r.stderr, "fabric_host") || !strings.Contains(r.stderr, other) {
		t.Fatalf("room list without a room service: %s", r.stderr)
	}
}
