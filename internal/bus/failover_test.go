package bus_test

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/room"
)

var soak = flag.Duration("soak", 0, "run TestFabricSoak for this long (outside CI), e.g. -soak 10m")

// loadInvokes is the load of the failure tests: n invokes from caller to provider, one at a
// time, each prepared once and sent again after a failure — the same requestId and bytes, so
// that the provider answers a retry of a call it already ran from its duplicate window — until
// it is acknowledged or its deadline (room.CallTimeout from its preparation) is near.
type loadInvokes struct {
	caller   *room.Caller
	provider room.HostID
	n        int
	pace     time.Duration // between calls, so that the load spans the failures

	done     atomic.Int64 // calls finished (acknowledged or given up)
	mu       sync.Mutex
	acked    int            // calls whose result was delivered
	gaveUp   int            // calls never acknowledged
	attempts map[string]int // failed sends, by room error code
}

// retryPause spaces a call's retries.
const retryPause = 50 * time.Millisecond

func (l *loadInvokes) run() {
	l.attempts = map[string]int{}
	req := lightCall
	req.Provider = l.provider
	for range l.n {
		prepared := time.Now()
		prep, err := l.caller.Prepare(req, prepared)
		if err != nil {
			panic(err)
		}
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := l.caller.Send(ctx, prep)
			cancel()
			l.mu.Lock()
			if err == nil {
				l.acked++
				l.mu.Unlock()
				break
			}
			code := room.CodeOf(err)
			l.attempts[code]++
			retryable := code == room.CodeUnavailable || code == room.CodeTimeout
			if !retryable || time.Since(prepared) > room.CallTimeout-2*time.Second {
				l.gaveUp++
				l.mu.Unlock()
				break
			}
			l.mu.Unlock()
			time.Sleep(retryPause)
		}
		l.done.Add(1)
		time.Sleep(l.pace)
	}
}

func (l *loadInvokes) waitDone(t testing.TB, count int64) {
	t.Helper()
	if !waitUntil(5*time.Minute, func() bool { return l.done.Load() >= count }) {
		t.Fatalf("the load stalled at %d calls", l.done.Load())
	}
}

// check asserts the invariants of a load whose every call must be acknowledged: no call given
// up, the invoker ran exactly once per acknowledged call (no duplicated effect, no effect whose
// result was lost), and only typed, retryable failures on the way.
func (l *loadInvokes) check(t testing.TB, inv *lightInvoker, what string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	failed := 0
	for code, n := range l.attempts {
		failed += n
		if code != room.CodeUnavailable && code != room.CodeTimeout {
			t.Errorf("%s: failure %q is not a retryable typed error", what, code)
		}
	}
	// Every call was acknowledged once, so invoker runs beyond the acknowledged calls would
	// be duplicated effects or effects whose result was lost; both must be 0.
	t.Logf("%s: %d invokes: %d acknowledged, %d given up, failed attempts %v (%d), invoker ran %d (runs − acknowledged = %d)",
		what, l.n, l.acked, l.gaveUp, l.attempts, failed, inv.count(), inv.count()-l.acked)
	if l.acked != l.n || l.gaveUp != 0 || inv.count() != l.acked {
		t.Fatalf("%s: %d of %d acknowledged, %d given up, the invoker ran %d times", what, l.acked, l.n, l.gaveUp, inv.count())
	}
}

// loadPuts writes n values under key, each retried until acknowledged (bounded).
type loadPuts struct {
	b      busport.Bucket
	key    string
	n      int
	pace   time.Duration
	done   atomic.Int64
	acked  int
	failed int
	last   []byte
}

func (l *loadPuts) run() {
	for i := range l.n {
		val := fmt.Appendf(nil, "v%04d", i)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := l.b.Put(ctx, l.key, val)
			cancel()
			if err == nil {
				l.acked++
				l.last = val
				break
			}
			l.failed++
			time.Sleep(retryPause)
		}
		l.done.Add(1)
		time.Sleep(l.pace)
	}
}

// testFailover runs 1,000 invokes from B (node 3) to A (node 1) and 300 KV writes by A while
// node 2 is stopped — Server.Shutdown, or SIGKILL of its process — a third of the way in and
// restarted on its store two thirds in; node 2 rejoins and catches up.
func testFailover(t *testing.T, child bool) {
	tf := newTestFabric(t)
	states := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := make([]*node, 3)
	start := func(i int) *node {
		if i == 1 && child {
			return tf.startChild(t, i, states[i])
		}
		return tf.start(t, i, states[i])
	}
	for i := range nodes {
		nodes[i] = start(i)
	}
	waitFormed(t, nodes[0].srv, 2)
	waitFormed(t, nodes[2].srv, 2)
	cfgs := [3]bus.DialConfig{tf.load(t, 0).DialConfig(nodes[0].srv), tf.remoteConfig(t, 1, 1), tf.load(t, 2).DialConfig(nodes[2].srv)}
	hosts, inv := roomOnFabric(t, tf, cfgs)
	a, b := hosts[0], hosts[2]
	bctx, bcancel := context.WithTimeout(context.Background(), 10*time.Second)
	kv, err := a.conn.Bucket(bctx, busport.BucketConfig{Name: room.RoomsBucket, MaxValueBytes: room.MaxRecordBytes})
	bcancel()
	if err != nil {
		t.Fatal(err)
	}
	invokes := &loadInvokes{caller: room.NewCaller(b.key, b.conn, b.dir), provider: a.key.ID(), n: 1000, pace: 5 * time.Millisecond}
	puts := &loadPuts{b: kv, key: fabricRoom + ".projection." + string(a.key.ID()), n: 300, pace: 15 * time.Millisecond}
	var wg sync.WaitGroup
	wg.Go(invokes.run)
	wg.Go(puts.run)

	invokes.waitDone(t, 333)
	nodes[1].stop(t)
	stopped := time.Now()
	invokes.waitDone(t, 666)
	restarted := time.Now()
	t.Logf("node 2 was down %v, from invoke 333 to 666 and up to write %d", restarted.Sub(stopped).Round(time.Millisecond), puts.done.Load())
	tf.restart(t, nodes[1])
	wg.Wait()
	// Node 2 is back on its store: node 1 routes to it, and C on it reads the last write.
	waitFormed(t, nodes[0].srv, 2)
	var rejoined time.Duration
	if !waitUntil(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ckv, err := hosts[1].conn.Bucket(ctx, busport.BucketConfig{Name: room.RoomsBucket, MaxValueBytes: room.MaxRecordBytes})
		if err != nil {
			return false
		}
		e, err := ckv.Get(ctx, puts.key)
		rejoined = time.Since(restarted)
		return err == nil && string(e.Value) == string(puts.last)
	}) {
		t.Fatal("C on the restarted node does not read the last acknowledged write")
	}
	invokes.check(t, inv, "node 2 down for the middle third")
	t.Logf("KV: %d of %d writes acknowledged, %d failed attempts; node 2 caught up %v after its restart",
		puts.acked, puts.n, puts.failed, rejoined.Round(time.Millisecond))
	if puts.acked != puts.n {
		t.Fatalf("KV writes: %d of %d acknowledged", puts.acked, puts.n)
	}
}

func TestFabricSurvivesNodeShutdown(t *testing.T) { testFailover(t, false) }

func TestFabricSurvivesSIGKILLOfANodeProcess(t *testing.T) { testFailover(t, true) }

// TestFabricPartitionOfTheProvidersNode stops A's node for 5 s a third of the way through
// 1,000 invokes from B. Pinned to its node, A is cut off (as a daemon embedding its node is):
// sends fail with typed errors and are retried, and every call is acknowledged once A is back,
// with the invoker run exactly once per call. Unpinned, A's connection fails over to another
// node.
func TestFabricPartitionOfTheProvidersNode(t *testing.T) {
	t.Run("pinned", func(t *testing.T) { testPartition(t, true) })
	t.Run("failover", func(t *testing.T) { testPartition(t, false) })
}

func testPartition(t *testing.T, pinned bool) {
	tf := newTestFabric(t)
	states := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := make([]*node, 3)
	for i := range nodes {
		nodes[i] = tf.start(t, i, states[i])
	}
	waitFormed(t, nodes[2].srv, 2)
	cfgs := [3]bus.DialConfig{tf.remoteConfig(t, 0, 0), tf.load(t, 1).DialConfig(nodes[1].srv), tf.load(t, 2).DialConfig(nodes[2].srv)}
	cfgs[0].Pinned = pinned
	hosts, inv := roomOnFabric(t, tf, cfgs)
	invokes := &loadInvokes{caller: room.NewCaller(hosts[2].key, hosts[2].conn, hosts[2].dir), provider: hosts[0].key.ID(), n: 1000, pace: 5 * time.Millisecond}
	var wg sync.WaitGroup
	wg.Go(invokes.run)
	invokes.waitDone(t, 333)
	nodes[0].stop(t)
	time.Sleep(5 * time.Second) // the partition: a real outage of a real node
	tf.restart(t, nodes[0])
	restarted := time.Now()
	invokes.mu.Lock()
	ackedAtRestart := invokes.acked
	invokes.mu.Unlock()
	// Recovered: the first call acknowledged after the restart.
	waitUntil(time.Minute, func() bool {
		invokes.mu.Lock()
		defer invokes.mu.Unlock()
		return invokes.acked > ackedAtRestart
	})
	recovery := time.Since(restarted)
	wg.Wait()
	what := "A's node down for 5 s, A failing over"
	if pinned {
		what = "A's node down for 5 s, A pinned to it"
	}
	invokes.check(t, inv, what)
	t.Logf("%s: first acknowledgement %v after the restart", what, recovery.Round(time.Millisecond))
	if pinned && len(invokes.attempts) == 0 {
		t.Fatal("no send failed while A was cut off")
	}
}

// TestFabricSoak repeats the failures — SIGKILL of node 2's process and its restart, a 5 s
// outage of A's node — under continuous load for -soak (skipped without it).
func TestFabricSoak(t *testing.T) {
	if *soak <= 0 {
		t.Skip("run with -soak DURATION")
	}
	tf := newTestFabric(t)
	states := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := []*node{tf.start(t, 0, states[0]), tf.startChild(t, 1, states[1]), tf.start(t, 2, states[2])}
	waitFormed(t, nodes[0].srv, 2)
	cfgs := [3]bus.DialConfig{tf.remoteConfig(t, 0, 0), tf.remoteConfig(t, 1, 1), tf.load(t, 2).DialConfig(nodes[2].srv)}
	cfgs[0].Pinned = true
	hosts, inv := roomOnFabric(t, tf, cfgs)
	deadline := time.Now().Add(*soak)
	var total loadInvokes
	total.attempts = map[string]int{}
	cycles := 0
	for time.Now().Before(deadline) {
		base := inv.count()
		l := &loadInvokes{caller: room.NewCaller(hosts[2].key, hosts[2].conn, hosts[2].dir), provider: hosts[0].key.ID(), n: 1000, pace: 5 * time.Millisecond}
		var wg sync.WaitGroup
		wg.Go(l.run)
		l.waitDone(t, 250)
		nodes[1].stop(t)
		l.waitDone(t, 500)
		tf.restart(t, nodes[1])
		l.waitDone(t, 750)
		nodes[0].stop(t)
		time.Sleep(5 * time.Second)
		tf.restart(t, nodes[0])
		wg.Wait()
		waitFormed(t, nodes[0].srv, 2)
		if l.acked != l.n || l.gaveUp != 0 || inv.count()-base != l.acked {
			t.Fatalf("cycle %d: %d of %d acknowledged, %d given up, the invoker ran %d times", cycles, l.acked, l.n, l.gaveUp, inv.count()-base)
		}
		total.acked += l.acked
		for k, v := range l.attempts {
			total.attempts[k] += v
		}
		cycles++
	}
	t.Logf("soak %v: %d cycles, %d invokes acknowledged, failed attempts %v, invoker ran %d", *soak, cycles, total.acked, total.attempts, inv.count())
}
