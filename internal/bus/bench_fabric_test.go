package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/room"
)

func percentile(ds []time.Duration, p float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return float64(s[i].Nanoseconds())
}

// startCluster starts the three nodes of tf in process and waits until they have formed.
func startCluster(b testing.TB, tf *testFabric) []*node {
	var nodes []*node
	for i := range nodeIPs {
		nodes = append(nodes, tf.start(b, i, b.TempDir()))
	}
	for _, n := range nodes {
		waitFormed(b, n.srv, 2)
	}
	return nodes
}

// BenchmarkFabricInvoke compares, in one run, a room invoke across the three-node TLS cluster
// (room.Caller of B on n3 → A's provider on n1 with a scripted invoker, and back) with a bare
// NATS request/reply over the same path (B on n3 → a subscriber on n1) carrying as many bytes.
// It reports p50 and p99 of each and their ratio; the target is ratio-p50 ≤ 1.3:
//
//	go test -run '^$' -bench FabricInvoke -benchtime 3000x ./internal/bus/
func BenchmarkFabricInvoke(b *testing.B) {
	tf := newTestFabric(b)
	nodes := startCluster(b, tf)
	cfgs := [3]bus.DialConfig{tf.load(b, 0).DialConfig(nodes[0].srv), tf.load(b, 1).DialConfig(nodes[1].srv), tf.load(b, 2).DialConfig(nodes[2].srv)}
	hosts, inv := roomOnFabric(b, tf, cfgs)
	a, bh := hosts[0], hosts[2]
	caller := room.NewCaller(bh.key, bh.conn, bh.dir)
	req := lightCall
	req.Provider = a.key.ID()

	// The bare path: host C's second connection, on n1, serves C's own call subject in the
	// room (which C may subscribe to and B may publish to).
	cOnN1 := tf.load(b, 1).DialConfig(nodes[0].srv)
	cc, err := bus.Dial(cOnN1)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()
	bareSubject := room.CallSubject(fabricRoom, tf.keys[1].ID())
	// The bare reply is as large as a signed ok reply of the light (v, room, provider, caller,
	// requestId, ok, result and a base64 MAC: 330 bytes give or take the ids' lengths).
	var callBytes atomic.Int64
	probe, err := cc.ServeMsg(bareSubject, 16, sizeProbe{seen: &callBytes})
	if err != nil {
		b.Fatal(err)
	}
	// The bare request is as large as a room call, header fields and args: one call to C,
	// sent to C's subject where the probe measures it (its empty reply is not a valid room
	// reply, so Send fails).
	creq := req
	creq.Provider = tf.keys[1].ID()
	waitUntil(10*time.Second, func() bool {
		prep, err := caller.Prepare(creq, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, _ = caller.Send(cctx, prep)
		return callBytes.Load() > 0
	})
	payload := make([]byte, callBytes.Load())
	if err := probe.Stop(); err != nil {
		b.Fatal(err)
	}
	sub, err := cc.Serve(bareSubject, 16, measuringEcho{reply: make([]byte, 330)})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Stop()

	invoke := func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := caller.Call(cctx, req); err != nil {
			b.Fatal(err)
		}
	}
	bare := func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := bh.conn.Request(cctx, bareSubject, payload); err != nil {
			b.Fatal(err)
		}
	}
	waitUntil(10*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := bh.conn.Request(cctx, bareSubject, payload)
		return err == nil
	})
	for range 300 {
		invoke()
		bare()
	}
	rooms, bares := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		invoke()
		t1 := time.Now()
		bare()
		t2 := time.Now()
		rooms, bares = append(rooms, t1.Sub(t0)), append(bares, t2.Sub(t1))
	}
	b.StopTimer()
	r50, r99, n50, n99 := percentile(rooms, 50), percentile(rooms, 99), percentile(bares, 50), percentile(bares, 99)
	b.ReportMetric(r50, "room-p50-ns")
	b.ReportMetric(r99, "room-p99-ns")
	b.ReportMetric(n50, "bare-p50-ns")
	b.ReportMetric(n99, "bare-p99-ns")
	b.ReportMetric(r50/n50, "ratio-p50")
	b.ReportMetric(r99/n99, "ratio-p99")
	b.ReportMetric(float64(len(payload)), "call-bytes")
	if inv.count() < b.N {
		b.Fatalf("the invoker ran %d times for %d invokes", inv.count(), b.N)
	}
}

// measuringEcho answers a bare request with reply.
type measuringEcho struct{ reply []byte }

func (e measuringEcho) Serve(context.Context, string, []byte) []byte { return e.reply }
func (e measuringEcho) Overloaded(string, []byte) []byte             { return nil }

// sizeProbe records the size of the last request it saw, header fields and data, and answers
// with an empty message.
type sizeProbe struct{ seen *atomic.Int64 }

func (p sizeProbe) ServeMsg(_ context.Context, _ string, m busport.Msg, respond func(busport.Msg)) {
	n := len(m.Data)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	p.seen.Store(int64(n))
	respond(busport.Msg{Data: []byte{}})
}
func (sizeProbe) OverloadedMsg(string, busport.Msg) busport.Msg { return busport.Msg{} }

// simHost is one simulated airlockd: its connection, room state, provider and caller.
type simHost struct {
	key    *room.HostKey
	conn   *bus.Conn
	dir    *room.Directory
	sync   *room.Sync
	prov   *room.Provider
	caller *room.Caller
	room   string
	peers  []room.HostID
}

// BenchmarkFabricRooms simulates 200 hosts in 20 rooms of 10 in one process, on the three-node
// cluster: each host has its own nkey user and NATS connection (spread over the nodes), its
// sync (roster, presence, projections, key records from the replicated buckets) and a
// provider with a scripted light. b.N invokes run from 32 workers, each from a random host to a
// random other member of its room. It reports invokes/s and the heap each host adds
// (runtime.MemStats after GC, the three embedded servers' share of it included):
//
//	go test -run '^$' -bench FabricRooms -benchtime 4000x ./internal/bus/
func BenchmarkFabricRooms(b *testing.B) {
	const hostsN, roomsN, workers = 200, 20, 32
	tf := newTestFabric(b)
	keys := make([]*room.HostKey, hostsN)
	seeds := make([]nkeys.KeyPair, hostsN)
	users := make([]bus.FabricUser, hostsN)
	for i := range keys {
		keys[i], _ = room.GenerateHostKey()
		seeds[i], _ = nkeys.CreateUser()
		pub, _ := seeds[i].PublicKey()
		r := fmt.Sprintf("room%02d", i%roomsN)
		users[i] = bus.FabricUser{Host: string(keys[i].ID()), Nkey: pub, Rooms: []string{r}}
		if i < roomsN {
			users[i].Owns = []string{r}
		}
	}
	for i := range nodeIPs {
		editFabric(b, tf.file(i), func(f *bus.FabricFile) { f.Users = append(f.Users, users...) })
	}
	nodes := startCluster(b, tf)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sims := make([]*simHost, hostsN)
	var invokes atomic.Int64
	for i := range sims {
		r := fmt.Sprintf("room%02d", i%roomsN)
		conn, err := bus.Dial(bus.DialConfig{Server: nodes[i%3].srv, Name: string(keys[i].ID()), Nkey: seeds[i],
			InboxPrefix: bus.InboxPrefix(string(keys[i].ID())), Replicas: 3})
		if err != nil {
			b.Fatal(err)
		}
		dir := room.NewDirectory()
		if err := dir.Trust(r, keys[i%roomsN].ID()); err != nil {
			b.Fatal(err)
		}
		sy, err := room.OpenSync(ctx, room.SyncConfig{Key: keys[i], Conn: conn, Directory: dir})
		if err != nil {
			b.Fatal(err)
		}
		sims[i] = &simHost{key: keys[i], conn: conn, dir: dir, sync: sy, room: r, caller: room.NewCaller(keys[i], conn, dir)}
	}
	b.Cleanup(func() {
		for _, s := range sims {
			if s.prov != nil {
				_ = s.prov.Close()
			}
			_ = s.sync.Close()
			_ = s.conn.Close()
		}
	})
	for r := range roomsN {
		var members []room.Member
		var ids []room.HostID
		for i := r; i < hostsN; i += roomsN {
			members = append(members, room.Member{Host: keys[i].ID(), Name: fmt.Sprintf("h%d", i)})
			ids = append(ids, keys[i].ID())
		}
		if err := sims[r].sync.PublishRoster(ctx, room.Roster{Room: sims[r].room, Title: "sim", Owner: keys[r].ID(), Version: 1, Members: members}); err != nil {
			b.Fatal(err)
		}
		for i := r; i < hostsN; i += roomsN {
			sims[i].peers = slices.DeleteFunc(slices.Clone(ids), func(h room.HostID) bool { return h == keys[i].ID() })
		}
	}
	for _, s := range sims {
		pubs := room.NewPublications()
		if err := pubs.Publish(room.Publication{Room: s.room, Capability: "living_room_light", Actions: []string{"set_color"}}); err != nil {
			b.Fatal(err)
		}
		if err := s.sync.PublishProjection(ctx, s.room, 1, pubs.InRoom(s.room)); err != nil {
			b.Fatal(err)
		}
		if err := s.sync.Join(ctx, s.room); err != nil {
			b.Fatal(err)
		}
		prov, err := room.NewProvider(room.ProviderConfig{Key: s.key, Conn: s.conn, Directory: s.dir, Publications: pubs,
			Invoker: countingInvoker{&invokes}})
		if err != nil {
			b.Fatal(err)
		}
		if err := prov.ServeRoom(s.room); err != nil {
			b.Fatal(err)
		}
		if err := prov.Start(); err != nil {
			b.Fatal(err)
		}
		s.prov = prov
	}
	// Every host reaches every member of its room before the clock starts.
	for _, s := range sims {
		for _, p := range s.peers {
			req := lightCall
			req.Room, req.Provider = s.room, p
			if !waitUntil(20*time.Second, func() bool {
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				defer ccancel()
				_, err := s.caller.Call(cctx, req)
				return err == nil
			}) {
				b.Fatalf("host %s cannot reach %s", s.key.ID()[:8], p[:8])
			}
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perHost := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / hostsN

	warm := invokes.Load()
	var failed atomic.Int64
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				s := sims[rng.IntN(hostsN)]
				req := lightCall
				req.Room, req.Provider = s.room, s.peers[rng.IntN(len(s.peers))]
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				if _, err := s.caller.Call(cctx, req); err != nil {
					failed.Add(1)
				}
				ccancel()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "invokes/s")
	b.ReportMetric(perHost, "heap-bytes/host")
	b.ReportMetric(float64(failed.Load()), "failed")
	if got := invokes.Load() - warm; got != int64(b.N)-failed.Load() {
		b.Fatalf("the invokers ran %d times for %d acknowledged invokes", got, int64(b.N)-failed.Load())
	}
}

// countingInvoker is a scripted light that counts invokes.
type countingInvoker struct{ n *atomic.Int64 }

func (c countingInvoker) Observe(context.Context, string) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

func (c countingInvoker) Invoke(_ context.Context, _, action string, _ json.RawMessage) (json.RawMessage, error) {
	c.n.Add(1)
	return json.RawMessage(`{"ok":true,"action":"` + action + `"}`), nil
}
