package bus_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/room"
)

// The fabric tests run three cluster nodes on 127.0.0.2, 127.0.0.3 and 127.0.0.4 (Linux
// routes the whole of 127.0.0.0/8 to the loopback interface), with TLS routes and the nkey
// users and permissions `airlock fabric init` writes.

// The child node's environment (bus_test.go's TestMain).
const (
	childNodeEnv  = "AIRLOCK_BUS_TEST_NODE"
	childStateEnv = "AIRLOCK_BUS_TEST_STATE"
)

var nodeIPs = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}

// fabricRoom is the room of the cluster tests: n1's host A owns it and provides the light,
// n2's host C and n3's host B are members.
const fabricRoom = "living"

// testFabric is a three-node fabric written by InitFabric, plus an outsider: a host with a
// broker user on every node and no room.
type testFabric struct {
	dir      string
	keys     []*room.HostKey // A (n1), C (n2), B (n3)
	outsider *room.HostKey
	outSeed  nkeys.KeyPair
	ca       *x509.CertPool
	ports    [2]int // client, route
}

func freePorts(t testing.TB) [2]int {
	t.Helper()
	var out [2]int
	for i := range out {
	retry:
		for range 50 {
			l, err := net.Listen("tcp", nodeIPs[0]+":0")
			if err != nil {
				t.Skipf("cannot listen on %s: %v", nodeIPs[0], err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			ls := []net.Listener{l}
			ok := true
			for _, ip := range nodeIPs[1:] {
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
				break retry
			}
		}
		if out[i] == 0 {
			t.Fatal("no port free on all three addresses")
		}
	}
	return out
}

func newTestFabric(t testing.TB) *testFabric {
	t.Helper()
	tf := &testFabric{dir: filepath.Join(t.TempDir(), "fabric"), ports: freePorts(t)}
	spec := bus.FabricSpec{Cluster: "airlock-test", ClientPort: tf.ports[0], RoutePort: tf.ports[1],
		Rooms: map[string][]string{fabricRoom: {"n1", "n2", "n3"}}}
	for i, ip := range nodeIPs {
		k, err := room.GenerateHostKey()
		if err != nil {
			t.Fatal(err)
		}
		tf.keys = append(tf.keys, k)
		spec.Nodes = append(spec.Nodes, bus.NodeSpec{Name: fmt.Sprintf("n%d", i+1), IP: ip, Host: string(k.ID())})
	}
	if err := bus.InitFabric(tf.dir, spec); err != nil {
		t.Fatal(err)
	}
	// The outsider: a broker user on every node, a member of no room.
	var err error
	tf.outsider, _ = room.GenerateHostKey()
	tf.outSeed, err = nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := tf.outSeed.PublicKey()
	for i := range nodeIPs {
		path := tf.file(i)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := bus.ParseFabric(data)
		if err != nil {
			t.Fatal(err)
		}
		f.Users = append(f.Users, bus.FabricUser{Host: string(tf.outsider.ID()), Nkey: pub})
		data, _ = json.Marshal(f)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(tf.dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	tf.ca = x509.NewCertPool()
	tf.ca.AppendCertsFromPEM(caPEM)
	return tf
}

func (tf *testFabric) file(i int) string {
	return filepath.Join(tf.dir, fmt.Sprintf("n%d", i+1), "fabric.json")
}

func (tf *testFabric) clientURL(i int) string {
	return "nats://" + net.JoinHostPort(nodeIPs[i], strconv.Itoa(tf.ports[0]))
}

func (tf *testFabric) load(t testing.TB, i int) *bus.Fabric {
	t.Helper()
	fb, err := bus.LoadFabric(tf.file(i))
	if err != nil {
		t.Fatal(err)
	}
	return fb
}

// node is one running cluster node, in this process or in a child.
type node struct {
	i     int
	state string
	srv   *bus.Server // in process
	cmd   *exec.Cmd   // child
}

// start starts node i in process, with its store under state.
func (tf *testFabric) start(t testing.TB, i int, state string) *node {
	t.Helper()
	n := &node{i: i, state: state, srv: tf.serve(t, i, state)}
	t.Cleanup(func() { _ = n.srv.Close() })
	return n
}

func (tf *testFabric) serve(t testing.TB, i int, state string) *bus.Server {
	t.Helper()
	s, err := bus.StartServer(bus.ServerConfig{StateDir: state, Fabric: tf.load(t, i)})
	if err != nil {
		t.Fatalf("node %d: %v", i+1, err)
	}
	return s
}

// restart starts the stopped node n again on its store, in process or in a child as before.
// The cleanup of n's first start stops it: one registered now would run before the cleanups
// of the hosts dialled since, and a host pinned to n would wait out every call of its
// teardown (5 s each).
func (tf *testFabric) restart(t testing.TB, n *node) {
	t.Helper()
	if n.cmd != nil {
		n.cmd = tf.spawn(t, n.i, n.state)
		return
	}
	n.srv = tf.serve(t, n.i, n.state)
}

// startChild starts node i in a child process (the test binary itself; see TestMain).
func (tf *testFabric) startChild(t testing.TB, i int, state string) *node {
	t.Helper()
	n := &node{i: i, state: state, cmd: tf.spawn(t, i, state)}
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
	})
	return n
}

// spawn starts node i in a child and waits until it serves.
func (tf *testFabric) spawn(t testing.TB, i int, state string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childNodeEnv+"="+tf.file(i), childStateEnv+"="+state)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	// The child runs until its stdin closes, so it cannot outlive this test binary.
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child node %d: %q %v", i+1, line, err)
	}
	return cmd
}

// stop stops a node: Shutdown in process, SIGKILL for a child.
func (n *node) stop(t testing.TB) {
	t.Helper()
	if n.srv != nil {
		_ = n.srv.Close()
		return
	}
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := n.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child did not die of SIGKILL: %v", err)
	}
}

// waitFormed waits until s sees its peers routed and a JetStream meta leader. (Whether each
// peer is current only the leader knows; a follower's view of it is not kept up to date.)
func waitFormed(t testing.TB, s *bus.Server, peers int) bus.FabricStatus {
	t.Helper()
	var st bus.FabricStatus
	ok := waitUntil(60*time.Second, func() bool {
		var err error
		st, err = s.Status()
		return err == nil && len(st.Routes) == peers && st.JetStream.Leader != "" && st.JetStream.ClusterSize == peers+1
	})
	if !ok {
		t.Fatalf("the cluster did not form: %+v", st)
	}
	return st
}

func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// fabricHost is one airlockd's room side on a fabric node.
type fabricHost struct {
	key  *room.HostKey
	conn *bus.Conn
	dir  *room.Directory
	sync *room.Sync
}

func dialHost(t testing.TB, cfg bus.DialConfig, key, owner *room.HostKey) *fabricHost {
	t.Helper()
	conn, err := bus.Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	dir := room.NewDirectory()
	if err := dir.Trust(fabricRoom, owner.ID()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sy, err := room.OpenSync(ctx, room.SyncConfig{Key: key, Conn: conn, Directory: dir, PresenceTTL: 3 * time.Second})
	if err != nil {
		t.Fatalf("sync: %v (refusals %d)", err, conn.Refusals())
	}
	t.Cleanup(func() { _ = sy.Close() })
	return &fabricHost{key: key, conn: conn, dir: dir, sync: sy}
}

// roomOnFabric sets up the room: A (on n1 through cfgA) owns it and serves the light; C (n2)
// and B (n3) join. It returns the hosts and A's invoker.
func roomOnFabric(t testing.TB, tf *testFabric, cfgs [3]bus.DialConfig) (hosts [3]*fabricHost, inv *lightInvoker) {
	t.Helper()
	owner := tf.keys[0]
	for i := range hosts {
		hosts[i] = dialHost(t, cfgs[i], tf.keys[i], owner)
	}
	a := hosts[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	members := []room.Member{{Host: tf.keys[0].ID(), Name: "A"}, {Host: tf.keys[1].ID(), Name: "C"}, {Host: tf.keys[2].ID(), Name: "B"}}
	if err := a.sync.PublishRoster(ctx, room.Roster{Room: fabricRoom, Title: "Living room", Owner: owner.ID(), Version: 1, Members: members}); err != nil {
		t.Fatalf("roster: %v (refusals %d)", err, a.conn.Refusals())
	}
	pubs := room.NewPublications()
	if err := pubs.Publish(room.Publication{Room: fabricRoom, Capability: "living_room_light", Actions: []string{"set_color"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.sync.PublishProjection(ctx, fabricRoom, 1, pubs.InRoom(fabricRoom)); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if err := h.sync.Join(ctx, fabricRoom); err != nil {
			t.Fatalf("join: %v (refusals %d)", err, h.conn.Refusals())
		}
	}
	inv = &lightInvoker{}
	prov, err := room.NewProvider(room.ProviderConfig{Key: owner, Conn: a.conn, Directory: a.dir, Publications: pubs, Invoker: inv})
	if err != nil {
		t.Fatal(err)
	}
	if err := prov.ServeRoom(fabricRoom); err != nil {
		t.Fatal(err)
	}
	if err := prov.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Close() })
	// A's provider subscription reaches the other nodes over the routes a moment after
	// Start; until then a call finds no responders. An observe (not published, so refused
	// by A, and never an invoke) tells when A answers from every node.
	for _, h := range hosts[1:] {
		c := room.NewCaller(h.key, h.conn, h.dir)
		if !waitUntil(10*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := c.Call(ctx, room.Request{Room: fabricRoom, Provider: owner.ID(), Capability: "living_room_light", Operation: room.Observe})
			return room.CodeOf(err) == room.CodeUnauthorized
		}) {
			t.Fatal("A's provider is not reachable from every node")
		}
	}
	for _, h := range hosts {
		if h.conn.Refusals() != 0 {
			t.Fatalf("a member's room operations were refused by the broker %d times", h.conn.Refusals())
		}
	}
	return hosts, inv
}

var lightCall = room.Request{Room: fabricRoom, Capability: "living_room_light", Operation: room.Invoke,
	Action: "set_color", Args: json.RawMessage(`{"color":"#123456"}`)}

// invokeCounts makes n invokes from caller to A, each a fresh call, and counts the outcomes.
type invokeCounts struct {
	ok     int
	failed map[string]int // by room error code
}

func invokeN(caller *room.Caller, provider room.HostID, n int, timeout time.Duration) invokeCounts {
	c := invokeCounts{failed: map[string]int{}}
	req := lightCall
	req.Provider = provider
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_, err := caller.Call(ctx, req)
		cancel()
		if err != nil {
			c.failed[room.CodeOf(err)]++
			continue
		}
		c.ok++
	}
	return c
}

// remoteConfig is a host's connection to node i's client listener, with TLS: it survives
// the node's restart by reconnecting.
func (tf *testFabric) remoteConfig(t testing.TB, i, host int) bus.DialConfig {
	t.Helper()
	return tf.load(t, host).RemoteDialConfig(tf.clientURL(i))
}

func TestFabricClusterRoutesReplicatesAndConfinesHosts(t *testing.T) {
	tf := newTestFabric(t)
	var nodes []*node
	for i := range nodeIPs {
		nodes = append(nodes, tf.start(t, i, t.TempDir()))
	}
	leaders := 0
	for _, n := range nodes {
		st := waitFormed(t, n.srv, 2)
		if st.Mode != bus.ModeCluster || st.Cluster != "airlock-test" || st.JetStream.ClusterSize != 3 {
			t.Fatalf("status: %+v", st)
		}
		// fabric init's certificates: the node's for 2 years, the CA's for 10.
		if c := st.Certificate; c == nil || time.Until(c.NotAfter) < 729*24*time.Hour || time.Until(c.NotAfter) > 731*24*time.Hour ||
			time.Until(c.CANotAfter) < 3649*24*time.Hour {
			t.Fatalf("certificate: %+v", st.Certificate)
		}
		for _, r := range st.Routes {
			if r.RTTMicros <= 0 && !waitUntil(5*time.Second, func() bool { s, _ := n.srv.Status(); return s.Routes[0].RTTMicros > 0 }) {
				t.Fatalf("route without an RTT: %+v", st.Routes)
			}
		}
		if st.JetStream.IsLeader {
			leaders++
			var out strings.Builder
			if err := bus.WriteStatus(&out, st); err != nil {
				t.Fatal(err)
			}
			text := out.String()
			if strings.Count(text, "\nroute  ") != 2 || !strings.Contains(text, "jetstream: leader "+st.Node+", cluster of 3") ||
				strings.Count(text, "  peer ") != 2 || !strings.Contains(text, "\ncertificate: valid until "+st.Certificate.NotAfter.Format(time.DateOnly)) {
				t.Fatalf("status text:\n%s", text)
			}
		}
	}
	if leaders != 1 {
		t.Fatalf("%d meta leaders", leaders)
	}
	// No seed or key reaches the status.
	for i, n := range nodes {
		st, _ := n.srv.Status()
		data, _ := json.Marshal(st)
		seed, _ := os.ReadFile(filepath.Join(tf.dir, fmt.Sprintf("n%d", i+1), "host.nk"))
		key, _ := os.ReadFile(filepath.Join(tf.dir, fmt.Sprintf("n%d", i+1), "node-key.pem"))
		if strings.Contains(string(data), strings.TrimSpace(string(seed))) || strings.Contains(string(data), "PRIVATE") || len(key) == 0 {
			t.Fatalf("node %d's status holds a secret", i+1)
		}
	}
	var cfgs [3]bus.DialConfig
	for i, n := range nodes {
		cfgs[i] = tf.load(t, i).DialConfig(n.srv)
	}
	hosts, inv := roomOnFabric(t, tf, cfgs)
	a, b := hosts[0], hosts[2]

	// The buckets have three replicas: every node holds the streams of the three the syncs
	// opened (rooms, presence, catalogs).
	for _, n := range nodes {
		if !waitUntil(10*time.Second, func() bool { st, _ := n.srv.Status(); return st.JetStream.Streams == 3 }) {
			st, _ := n.srv.Status()
			t.Fatalf("node %d holds %d streams, want the three buckets'", n.i+1, st.JetStream.Streams)
		}
	}
	// B (n3) learnt the roster A (n1) wrote, and invokes A's light across the cluster.
	if r, ok := b.dir.Roster(fabricRoom); !ok || !r.Has(a.key.ID()) {
		t.Fatalf("B's roster: %+v %v", r, ok)
	}
	got := invokeN(room.NewCaller(b.key, b.conn, b.dir), a.key.ID(), 50, 10*time.Second)
	if got.ok != 50 || inv.count() != 50 {
		t.Fatalf("50 invokes across the cluster: %+v, the invoker ran %d times", got, inv.count())
	}

	// The outsider has a broker user but no room: the broker refuses its call into the room,
	// its read of the room's keys and its subscription to A's provider subject. The provider
	// never sees the call.
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: tf.ca}
	out, err := bus.Dial(bus.DialConfig{URL: tf.clientURL(1), Name: "outsider", Nkey: tf.outSeed, TLS: tlsCfg, Replicas: 3,
		InboxPrefix: bus.InboxPrefix(string(tf.outsider.ID()))})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err = out.Request(ctx, room.CallSubject(fabricRoom, a.key.ID()), []byte(`{}`))
	cancel()
	if !errors.Is(err, busport.ErrTimeout) {
		t.Fatalf("the outsider's call: %v", err)
	}
	if !waitUntil(5*time.Second, func() bool { return out.Refusals() == 1 }) {
		t.Fatalf("the broker refused the outsider %d times, want 1", out.Refusals())
	}
	bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
	rooms, err := out.Bucket(bctx, busport.BucketConfig{Name: room.RoomsBucket, MaxValueBytes: room.MaxRecordBytes})
	bcancel()
	if err != nil {
		t.Fatalf("the outsider opens the rooms bucket: %v", err)
	}
	gctx, gcancel := context.WithTimeout(context.Background(), time.Second)
	_, err = rooms.Get(gctx, fabricRoom+".roster")
	gcancel()
	if err == nil || out.Refusals() < 2 {
		t.Fatalf("the outsider read the roster: %v, refusals %d", err, out.Refusals())
	}
	sub, err := out.Serve("airlock.room.*.call."+string(a.key.ID()), 1, nopHandler{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	if !waitUntil(5*time.Second, func() bool { return out.Refusals() >= 3 }) {
		t.Fatalf("the outsider subscribed to A's provider subject (refusals %d)", out.Refusals())
	}
	if inv.count() != 50 {
		t.Fatalf("the invoker ran for the outsider: %d", inv.count())
	}

	// A member that does not own the room cannot write its roster at the broker either.
	c := hosts[1]
	before := c.conn.Refusals()
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
	err = c.sync.PublishRoster(pctx, room.Roster{Room: fabricRoom, Title: "mine now", Owner: c.key.ID(), Version: 9,
		Members: []room.Member{{Host: c.key.ID(), Name: "C"}}})
	pcancel()
	if err == nil || !waitUntil(5*time.Second, func() bool { return c.conn.Refusals() > before }) {
		t.Fatalf("C wrote the roster: %v", err)
	}
	if r, _ := b.dir.Roster(fabricRoom); r.Version != 1 {
		t.Fatalf("B's roster changed: %+v", r)
	}
}

type nopHandler struct{}

func (nopHandler) Serve(context.Context, string, []byte) []byte { return []byte("x") }
func (nopHandler) Overloaded(string, []byte) []byte             { return nil }

func TestDefaultRoomSchemeIsTheRoomLayers(t *testing.T) {
	s := bus.DefaultRoomScheme
	h := room.HostID(strings.Repeat("ab", 32))
	if s.RoomsBucket != room.RoomsBucket || s.PresenceBucket != room.PresenceBucket || s.CatalogBucket != room.CatalogBucket ||
		room.CallSubject("living", h) != s.CallPrefix+".living.call."+string(h) {
		t.Fatalf("the scheme %+v is not room's", s)
	}
}

// TestFabricLeafNodeReachesTheClusterThroughTheHub runs a fourth node as a leaf of the
// cluster (TLS, authenticated at the hub as its host's nkey user): its host D reads the
// room's roster from the hub's JetStream (under the hub's domain, with its permissions applied
// at the hub) and its requests reach a subscriber on n1.
func TestFabricLeafNodeReachesTheClusterThroughTheHub(t *testing.T) {
	tf := newTestFabric(t)
	leafPort := freePorts(t)[0]
	d, _ := room.GenerateHostKey()
	dSeed, _ := nkeys.CreateUser()
	dPub, _ := dSeed.PublicKey()
	for i := range nodeIPs {
		editFabric(t, tf.file(i), func(f *bus.FabricFile) {
			f.Users = append(f.Users, bus.FabricUser{Host: string(d.ID()), Nkey: dPub, Rooms: []string{fabricRoom}})
			if i == 0 {
				f.Cluster.LeafListen = net.JoinHostPort(nodeIPs[0], strconv.Itoa(leafPort))
			}
		})
	}
	leafDir := filepath.Join(tf.dir, "leaf")
	if err := os.Mkdir(leafDir, 0o700); err != nil {
		t.Fatal(err)
	}
	seed, _ := dSeed.Seed()
	if err := os.WriteFile(filepath.Join(leafDir, "host.nk"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	leaf := bus.FabricFile{Version: bus.FabricVersion, Node: "leaf1", Mode: bus.ModeLeaf,
		TLS:  bus.FabricTLS{CA: "../n1/ca.pem", Cert: "../n1/node.pem", Key: "../n1/node-key.pem"},
		Leaf: &bus.FabricLeaf{URLs: []string{net.JoinHostPort(nodeIPs[0], strconv.Itoa(leafPort))}, Domain: "airlock-test", Replicas: 3},
		Host: bus.FabricHost{ID: string(d.ID()), Seed: "host.nk"}}
	data, _ := json.Marshal(leaf)
	if err := os.WriteFile(filepath.Join(leafDir, "fabric.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}

	var nodes []*node
	for i := range nodeIPs {
		nodes = append(nodes, tf.start(t, i, t.TempDir()))
	}
	waitFormed(t, nodes[0].srv, 2)
	lfb, err := bus.LoadFabric(filepath.Join(leafDir, "fabric.json"))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := bus.StartServer(bus.ServerConfig{StateDir: t.TempDir(), Fabric: lfb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ls.Close() })
	if !waitUntil(20*time.Second, func() bool { st, _ := ls.Status(); return len(st.Leaves) == 1 && st.Leaves[0].Hub }) {
		st, _ := ls.Status()
		t.Fatalf("the leaf did not connect to its hub: %+v", st)
	}
	if st, _ := nodes[0].srv.Status(); len(st.Leaves) != 1 || st.Leaves[0].Hub {
		t.Fatalf("the hub's view of its leaf: %+v", st.Leaves)
	}
	cfgs := [3]bus.DialConfig{tf.load(t, 0).DialConfig(nodes[0].srv), tf.load(t, 1).DialConfig(nodes[1].srv), tf.load(t, 2).DialConfig(nodes[2].srv)}
	_, inv := roomOnFabric(t, tf, cfgs)

	dh := dialHost(t, lfb.DialConfig(ls), d, tf.keys[0])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := dh.sync.Join(ctx, fabricRoom); err != nil {
		t.Fatal(err)
	}
	if r, ok := dh.dir.Roster(fabricRoom); !ok || r.Version != 1 {
		t.Fatalf("D's roster through the leaf: %+v %v", r, ok)
	}
	// Request/reply through the leaf. The hub tells a leaf of a subscription only when the
	// leaf's user may publish to all of it; A's provider serves one subject per room, so
	// D's call into "living" reaches it through the hub, and A's provider, not the broker,
	// refuses it: D has a broker user with the room but is not on the room's roster.
	a := tf.keys[0].ID()
	req := lightCall
	req.Provider = a
	var err2 error
	if !waitUntil(10*time.Second, func() bool {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer ccancel()
		_, err2 = room.NewCaller(d, dh.conn, dh.dir).Call(cctx, req)
		return room.CodeOf(err2) == room.CodeUnauthorized
	}) || inv.count() != 0 {
		t.Fatalf("D's room call through the leaf: %v (invoker %d)", err2, inv.count())
	}
}

func editFabric(t testing.TB, path string, edit func(*bus.FabricFile)) {
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

// TestFabricSetUsersGrantsAndRevokesAtRuntime makes the outsider a member of the room on node
// 2 without a restart: its call then passes the broker (and reaches A, who refuses it: the
// roster does not list it); taken out again, the broker refuses it again.
func TestFabricSetUsersGrantsAndRevokesAtRuntime(t *testing.T) {
	tf := newTestFabric(t)
	var nodes []*node
	for i := range nodeIPs {
		nodes = append(nodes, tf.start(t, i, t.TempDir()))
	}
	waitFormed(t, nodes[1].srv, 2)
	cfgs := [3]bus.DialConfig{tf.load(t, 0).DialConfig(nodes[0].srv), tf.load(t, 1).DialConfig(nodes[1].srv), tf.load(t, 2).DialConfig(nodes[2].srv)}
	hosts, inv := roomOnFabric(t, tf, cfgs)
	a := hosts[0].key.ID()
	out, err := bus.Dial(bus.DialConfig{Server: nodes[1].srv, Name: "outsider", Nkey: tf.outSeed, Replicas: 3,
		InboxPrefix: bus.InboxPrefix(string(tf.outsider.ID()))})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := out.Request(ctx, room.CallSubject(fabricRoom, a), []byte(`{}`))
		return err
	}
	if err := call(); !errors.Is(err, busport.ErrTimeout) || !waitUntil(5*time.Second, func() bool { return out.Refusals() == 1 }) {
		t.Fatalf("before: %v, refusals %d", err, out.Refusals())
	}
	users := tf.load(t, 1).File.Users
	for i := range users {
		if users[i].Host == string(tf.outsider.ID()) {
			users[i].Rooms = []string{fabricRoom}
		}
	}
	if err := nodes[1].srv.SetUsers(users); err != nil {
		t.Fatal(err)
	}
	// A answers (a refusal of a malformed call, signed); the broker let it through.
	if err := call(); err != nil || out.Refusals() != 1 {
		t.Fatalf("after the grant: %v, refusals %d", err, out.Refusals())
	}
	// Only the outsider is taken out: C, whose user is on the same node, keeps its room, and
	// its teardown leaves the room as a member's does (cut off too, each step of its leave
	// waited out its timeout, 15 s in all).
	for i := range users {
		if users[i].Host == string(tf.outsider.ID()) {
			users[i].Rooms, users[i].Owns = nil, nil
		}
	}
	if err := nodes[1].srv.SetUsers(users); err != nil {
		t.Fatal(err)
	}
	if err := call(); !errors.Is(err, busport.ErrTimeout) || !waitUntil(5*time.Second, func() bool { return out.Refusals() == 2 }) {
		t.Fatalf("after the revocation: %v, refusals %d", err, out.Refusals())
	}
	if inv.count() != 0 {
		t.Fatalf("the invoker ran %d times", inv.count())
	}
	// Users without the node's own host, or malformed, are refused.
	if err := nodes[1].srv.SetUsers(users[:0]); !errors.Is(err, &bus.FabricError{Code: bus.CodeFabricInvalid}) {
		t.Fatalf("no users: %v", err)
	}
	bad := append([]bus.FabricUser(nil), users...)
	bad[0].Rooms = []string{"a.b"}
	if err := nodes[1].srv.SetUsers(bad); !errors.Is(err, &bus.FabricError{Code: bus.CodeFabricInvalid}) {
		t.Fatalf("bad room: %v", err)
	}
	local, err := bus.StartServer(bus.ServerConfig{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if err := local.SetUsers(users); !errors.Is(err, bus.ErrConfig) {
		t.Fatalf("a server without a fabric: %v", err)
	}
}
