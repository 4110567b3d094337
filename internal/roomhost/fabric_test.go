package roomhost

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

// fabricIPs are the two nodes' addresses of the fabric tests.
var fabricIPs = []string{"127.0.0.2", "127.0.0.3"}

// fabricPorts finds a client and a route port free on both addresses; it skips where the
// addresses cannot be bound, except under CI, which must run the test.
func fabricPorts(t *testing.T) [2]int {
	t.Helper()
	var out [2]int
	for i := range out {
		for range 50 {
			l, err := net.Listen("tcp", fabricIPs[0]+":0")
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("cannot listen on %s: %v", fabricIPs[0], err)
				}
				t.Skipf("cannot listen on %s: %v", fabricIPs[0], err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l2, err := net.Listen("tcp", net.JoinHostPort(fabricIPs[1], strconv.Itoa(port)))
			_ = l.Close()
			if err == nil {
				_ = l2.Close()
				if i == 0 || port != out[0] {
					out[i] = port
					break
				}
			}
		}
		if out[i] == 0 {
			t.Fatal("no port free on both addresses")
		}
	}
	return out
}

// fabricHost is a host directory with its host key, and its node's fabric file.
type fabricHost struct {
	dir    string
	id     room.HostID
	fabric string
}

// newFabric writes a two-node fabric (n1 for A, n2 for B) whose users list no room: what the
// hosts may touch at the broker comes from the rooms they are in.
func newFabric(t *testing.T) []fabricHost {
	t.Helper()
	ports := fabricPorts(t)
	top := filepath.Join(t.TempDir(), "fabric")
	spec := bus.FabricSpec{Cluster: "roomhost-test", ClientPort: ports[0], RoutePort: ports[1]}
	var hosts []fabricHost
	for i, ip := range fabricIPs {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		k, _, err := room.LoadOrCreateHostKey(dir)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("n%d", i+1)
		spec.Nodes = append(spec.Nodes, bus.NodeSpec{Name: name, IP: ip, Host: string(k.ID())})
		hosts = append(hosts, fabricHost{dir: dir, id: k.ID(), fabric: filepath.Join(top, name, "fabric.json")})
	}
	if err := bus.InitFabric(top, spec); err != nil {
		t.Fatal(err)
	}
	return hosts
}

func loadFabric(t *testing.T, path string) *bus.Fabric {
	t.Helper()
	fb, err := bus.LoadFabric(path)
	if err != nil {
		t.Fatal(err)
	}
	return fb
}

// startFabricHost starts the room service of dir as a node of fb.
func startFabricHost(ctx context.Context, dir string, fb *bus.Fabric) (*host, error) {
	return startFabricHostConfig(ctx, dir, fb, nil)
}

// startFabricHostConfig is startFabricHost with more configuration.
func startFabricHostConfig(ctx context.Context, dir string, fb *bus.Fabric, more func(*Config)) (*host, error) {
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		return nil, err
	}
	h := &host{st: st, dir: dir, caps: &lamp{}}
	// Warnings (a room not rejoined, a fabric still forming) go to stderr, which go test
	// shows when the package fails.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := Config{StateDir: dir, Store: st, Capabilities: h.caps, Fabric: fb, PresenceTTL: 3 * time.Second, Logger: logger}
	if more != nil {
		more(&cfg)
	}
	h.svc, err = Start(ctx, cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	return h, nil
}

// startFabricHosts starts the hosts at once: a two-node cluster's JetStream needs both nodes
// before either host can open its buckets.
func startFabricHosts(t *testing.T, hosts []fabricHost) []*host {
	t.Helper()
	return startFabricHostsConfig(t, hosts, nil)
}

// startFabricHostsConfig is startFabricHosts with more configuration.
func startFabricHostsConfig(t *testing.T, hosts []fabricHost, more func(*Config)) []*host {
	t.Helper()
	out := make([]*host, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, fh := range hosts {
		wg.Go(func() {
			c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out[i], errs[i] = startFabricHostConfig(c, fh.dir, loadFabric(t, fh.fabric), more)
		})
	}
	wg.Wait()
	for i, h := range out {
		if h != nil {
			t.Cleanup(h.stop)
		}
		if errs[i] != nil {
			t.Fatalf("host %d: %v", i, errs[i])
		}
	}
	return out
}

// TestFabricHostsFollowTheirRoomsAtTheBroker runs two room services as the two nodes of a TLS
// cluster, each host connected as its nkey user, with no room in the fabric file: A creates a
// room and B joins it through a join code (both allowed by the permissions the rooms give),
// B invokes A's lamp across the route, B's node refuses B's calls into the room once B left
// it, and a restarted B gets its stored rooms' permissions back at start.
//
// B is the node that leads a stream of the room buckets, so its restart finds that stream
// leaderless (A, alone, cannot elect one; the two elect after NATS's election timeout of
// seconds) and its room service's first request to it goes unanswered. The room service
// sends it again as soon as the stream has a leader, not at the end of the attempt: the
// restart has attempts of an hour, so it starts only through that retry (before, it waited
// out each 5 s attempt, once or twice per restart).
func TestFabricHostsFollowTheirRoomsAtTheBroker(t *testing.T) {
	fh := newFabric(t)
	hs := startFabricHosts(t, fh)
	x := streamLeader(t, hs)
	a, b := hs[1-x], hs[x]
	bg := ctx(t)

	st, err := a.svc.FabricStatus()
	if err != nil || st.Mode != bus.ModeCluster || st.Node != fmt.Sprintf("n%d", 2-x) || st.Cluster != "roomhost-test" || len(st.Routes) != 1 {
		t.Fatalf("A's fabric status %+v, %v", st, err)
	}
	if _, err := a.svc.Create(bg, "home", "Home"); err != nil {
		t.Fatal(err)
	}
	inv, err := a.svc.Invite(bg, "home", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Join(bg, inv.Code); err != nil {
		t.Fatalf("join over the fabric: %v (B's refusals %d)", err, b.svc.conn.Refusals())
	}
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"set_color"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B sees A's lamp", func() bool {
		caps, _ := b.svc.Capabilities(bg, "home")
		return len(caps) == 1
	})
	res, err := b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", json.RawMessage(`{"color":"#102030"}`))
	if err != nil || string(res) != `{"done":"set_color"}` {
		t.Fatalf("invoke across the fabric = %s, %v", res, err)
	}
	if a.svc.conn.Refusals() != 0 || b.svc.conn.Refusals() != 0 {
		t.Fatalf("refusals: A %d, B %d", a.svc.conn.Refusals(), b.svc.conn.Refusals())
	}

	// A restarted B is let into its stored room by its node at start.
	groups, _ := b.svc.server.Groups()
	t.Logf("restarting B (n%d), whose groups are %v", x+1, groups)
	b.stop()
	began := time.Now()
	b2, err := startFabricHostConfig(bg, fh[x].dir, loadFabric(t, fh[x].fabric), func(cfg *Config) { cfg.busAttempt = time.Hour })
	if err != nil {
		t.Fatalf("the restarted B's room service after %v: %v", time.Since(began).Round(time.Millisecond), err)
	}
	t.Logf("the restarted B's room service started in %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(b2.stop)
	// The two-node cluster lost its quorum while B was down; B's node rejoins and B's
	// restore retries what met the re-forming cluster.
	deadline := time.Now().Add(30 * time.Second)
	for caps, _ := b2.svc.Capabilities(bg, "home"); len(caps) != 1; caps, _ = b2.svc.Capabilities(bg, "home") {
		if time.Now().After(deadline) {
			t.Fatal("restarted B does not see A's lamp")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := b2.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", json.RawMessage(`{"color":"#203040"}`)); err != nil {
		t.Fatalf("invoke after B's restart: %v (refusals %d)", err, b2.svc.conn.Refusals())
	}

	// Once B left, its node refuses its calls into the room: the broker, not only B's own
	// bookkeeping, which would answer unknown_room before sending.
	if err := b2.svc.CloseRoom(bg, "home"); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	before := a.caps.count()
	if _, err := b2.svc.conn.Request(c, room.CallSubject("home", a.svc.HostID()), []byte(`{}`)); err == nil {
		t.Fatal("a call after leaving got an answer")
	}
	waitFor(t, "B's node refuses the call", func() bool { return b2.svc.conn.Refusals() > 0 })
	if a.caps.count() != before {
		t.Fatal("the lamp ran for a host that left the room")
	}
	// A stops first, while B's node still gives the two-node cluster its quorum. In the
	// cleanups' order B's node stopped first, and A, alone on the fabric, waited out each
	// JetStream write of its leave (16 s in all); B, which left the room, has none to make.
	a.stop()
	b2.stop()
}

// streamLeader waits until both nodes know a leader for every JetStream group they take part
// in, and returns the index of a node that leads a stream.
func streamLeader(t *testing.T, hs []*host) int {
	t.Helper()
	x := -1
	waitFor(t, "both nodes to know a leader for every stream", func() bool {
		x = -1
		for i, h := range hs {
			groups, err := h.svc.server.Groups()
			if err != nil || len(groups) < 2 {
				return false
			}
			for g, leader := range groups {
				if leader == "" {
					return false
				}
				if g != bus.MetaGroup && leader == fmt.Sprintf("n%d", i+1) {
					x = i
				}
			}
		}
		return x >= 0
	})
	return x
}

// TestFabricStopEndsTheKeepersRequest: the keeper's check of the room buckets, in flight when
// the service stops, ends with it. The other node, which led a stream, stopped first: the
// surviving node still takes it for that stream's leader, so the check of that stream gets no
// answer (the keeper checks every 10 ms here), and Close waited for the request's 10 s
// timeout before.
func TestFabricStopEndsTheKeepersRequest(t *testing.T) {
	fh := newFabric(t)
	hs := startFabricHostsConfig(t, fh, func(c *Config) { c.keepEvery = 10 * time.Millisecond })
	x := streamLeader(t, hs)
	y := hs[1-x]
	hs[x].stop()
	waitFor(t, "the surviving node's route to the stopped one to close", func() bool {
		st, err := y.svc.FabricStatus()
		return err == nil && len(st.Routes) == 0
	})
	began := time.Now()
	y.stop()
	if took := time.Since(began); took > busTimeout/2 {
		t.Fatalf("the surviving node's room service took %v to stop", took)
	}
}

// TestFabricRefusesAnotherHostsFile: a fabric file serves one host; a daemon whose host key
// is another's does not start its room service, and a fabric excludes a NATS URL.
func TestFabricRefusesAnotherHostsFile(t *testing.T) {
	fh := newFabric(t)
	_, err := startFabricHost(ctx(t), fh[0].dir, loadFabric(t, fh[1].fabric))
	codeIs(t, err, CodeFabricHost)

	st, err := store.Open(fh[0].dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := Start(ctx(t), Config{StateDir: fh[0].dir, Store: st, Capabilities: &lamp{}, Fabric: loadFabric(t, fh[0].fabric),
		Via: &Service{}}); err == nil {
		t.Fatal("started with a fabric and another daemon's bus")
	}
}

// TestFabricStatusWithoutFabric: the embedded server alone is one local node; a host on
// another daemon's bus has none to report.
func TestFabricStatusWithoutFabric(t *testing.T) {
	a := startHost(t, nil, "", 0)
	st, err := a.svc.FabricStatus()
	if err != nil || st.Mode != "local" || len(st.Routes) != 0 || !st.JetStream.Enabled {
		t.Fatalf("status %+v, %v", st, err)
	}
	b := startHost(t, a.svc, "", 0)
	_, err = b.svc.FabricStatus()
	codeIs(t, err, CodeNoFabricStatus)
}

// TestFabricLeafHostJoinsAndCalls runs a third host D on a leaf node of n1 (TLS, D's nkey user
// applied at the hub, its rooms as n1's file lists them): D joins A's room with a join code and
// invokes A's lamp through the hub, which announces A's per-room provider subscription to
// the leaf because D's user may publish to all of it.
func TestFabricLeafHostJoinsAndCalls(t *testing.T) {
	fh := newFabric(t)
	l, err := net.Listen("tcp", fabricIPs[0]+":0")
	if err != nil {
		t.Fatal(err)
	}
	leafListen := l.Addr().String()
	_ = l.Close()

	dDir := t.TempDir()
	if err := os.Chmod(dDir, 0o700); err != nil {
		t.Fatal(err)
	}
	dKey, _, err := room.LoadOrCreateHostKey(dDir)
	if err != nil {
		t.Fatal(err)
	}
	dSeed, _ := nkeys.CreateUser()
	dPub, _ := dSeed.PublicKey()
	editFile(t, fh[0].fabric, func(f *bus.FabricFile) {
		f.Cluster.LeafListen = leafListen
		f.Users = append(f.Users, bus.FabricUser{Host: string(dKey.ID()), Nkey: dPub, Rooms: []string{"home"}})
	})
	top := filepath.Dir(filepath.Dir(fh[0].fabric))
	leafDir := filepath.Join(top, "leaf")
	if err := os.Mkdir(leafDir, 0o700); err != nil {
		t.Fatal(err)
	}
	seed, _ := dSeed.Seed()
	if err := os.WriteFile(filepath.Join(leafDir, "host.nk"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	leaf := bus.FabricFile{Version: bus.FabricVersion, Node: "leaf1", Mode: bus.ModeLeaf,
		TLS:  bus.FabricTLS{CA: "../n1/ca.pem", Cert: "../n1/node.pem", Key: "../n1/node-key.pem"},
		Leaf: &bus.FabricLeaf{URLs: []string{leafListen}, Domain: "roomhost-test", Replicas: 2},
		Host: bus.FabricHost{ID: string(dKey.ID()), Seed: "host.nk"}}
	data, _ := json.Marshal(leaf)
	if err := os.WriteFile(filepath.Join(leafDir, "fabric.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}

	hs := startFabricHosts(t, fh)
	a := hs[0]
	bg := ctx(t)
	d, err := startFabricHost(bg, dDir, loadFabric(t, filepath.Join(leafDir, "fabric.json")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	if st, err := d.svc.FabricStatus(); err != nil || st.Mode != bus.ModeLeaf || len(st.Leaves) != 1 || !st.Leaves[0].Hub {
		t.Fatalf("D's fabric status %+v, %v", st, err)
	}

	if _, err := a.svc.Create(bg, "home", "Home"); err != nil {
		t.Fatal(err)
	}
	inv, err := a.svc.Invite(bg, "home", "dora")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.svc.Join(bg, inv.Code); err != nil {
		t.Fatalf("join through the leaf: %v (D's refusals %d)", err, d.svc.conn.Refusals())
	}
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"set_color"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "D sees A's lamp", func() bool {
		caps, _ := d.svc.Capabilities(bg, "home")
		return len(caps) == 1
	})
	var res json.RawMessage
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err = d.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", json.RawMessage(`{"color":"#405060"}`))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the hub announces A's subscription a moment after D's join
	}
	if err != nil || string(res) != `{"done":"set_color"}` || a.caps.count() != 1 {
		t.Fatalf("D's invoke through the leaf = %s, %v (lamp ran %d)", res, err, a.caps.count())
	}
}

func editFile(t *testing.T, path string, edit func(*bus.FabricFile)) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := bus.ParseFabric(data)
	if err != nil {
		t.Fatal(err)
	}
	edit(f)
	data, _ = json.Marshal(f)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
