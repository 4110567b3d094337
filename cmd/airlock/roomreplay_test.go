package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/roomhost"
)

// replayCalls is how many calls TestRoomReplayAfterProviderRestart captures and replays: the
// number of the report that found the attack (issue 24, finding 2).
const replayCalls = 200

// TestRoomReplayAfterProviderRestart is issue 24's finding 2, with real binaries: A owns a room
// on its embedded bus, B joins it and provides the Go lamp (behind a tee that logs every
// request the lamp gets); a process on the bus captures A's calls to B while A makes
// replayCalls of them; B's airlockd is killed with SIGKILL and started again on the same state
// directory; once B answers again, the captured calls are published again, every one still
// within the clock window. Each must be refused duplicate_request, and the lamp must run none
// of them a second time. Before the provider kept its callers' floors durable, the replay ran
// 172 of 200 again (in memory, the duplicate window was empty after the restart).
func TestRoomReplayAfterProviderRestart(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	effectsLog := filepath.Join(t.TempDir(), "effects.log")
	effects := func() int {
		data, _ := os.ReadFile(effectsLog)
		return strings.Count(string(data), `"method":"invoke"`)
	}

	a := startRoomHost(t)
	var sa roomStatusData
	a.data(&sa, "room", "status")
	root := daemontest.ShortDir(t)
	bOpts := daemontest.Options{Socket: filepath.Join(root, "b.sock"), StateDir: filepath.Join(root, "state"), Args: []string{"--nats-via", a.d.Socket}}
	b := startRoomHostWith(t, bOpts)
	var sb roomStatusData
	b.data(&sb, "room", "status")

	a.cli("", "room", "create", "home").wantCode(t, exitOK)
	var inv struct {
		Code string `json:"code"`
	}
	a.data(&inv, "room", "invite", "home")
	b.cli(inv.Code+"\n", "room", "join", "-").wantCode(t, exitOK)
	// The lamp behind a logger, in a script whose digest does not change when the log grows
	// (the restart would otherwise hold the adapter as changed until approved again).
	script := filepath.Join(t.TempDir(), "counting-lamp.sh")
	if err := os.WriteFile(script, []byte(loggedAdapter(effectsLog, lamp)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.cli("", "adapter", "register", "lamp", "--", "/bin/sh", script).wantCode(t, exitOK)
	b.cli("", "room", "publish", "--room", "home", "--cap", "desk_lamp", "--actions", "set_power").wantCode(t, exitOK)
	var caps struct {
		Capabilities []roomCapData `json:"capabilities"`
	}
	waitFor(t, "A to see B's lamp", func() bool {
		a.data(&caps, "room", "caps", "--room", "home")
		return described(caps.Capabilities, 1)
	})
	invoke := func(i int) result {
		return a.cli("", "room", "invoke", "--room", "home", "--provider", sb.HostID, "--cap", "desk_lamp", "--action", "set_power",
			"--args", `{"on":`+strconv.FormatBool(i%2 == 0)+`}`, "--json")
	}

	nc, captured := captureCalls(t, sa.NATSURL, filepath.Join(bOpts.StateDir, roomhost.BusSeedFile), sb.HostID,
		room.CallSubject("home", room.HostID(sb.HostID)))
	// Four at a time, the caller's in-flight bound at a provider, to keep the capture short:
	// the replay must come within the clock window of the first call's signing.
	var wg sync.WaitGroup
	failed := make(chan result, replayCalls)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < replayCalls; i += 4 {
				if r := invoke(i); r.code != exitOK {
					failed <- r
				}
			}
		})
	}
	wg.Wait()
	close(failed)
	for r := range failed {
		t.Fatalf("a call before the restart failed: %s%s", r.stdout, r.stderr)
	}
	if n := effects(); n != replayCalls {
		t.Fatalf("the lamp ran %d invokes for %d calls", n, replayCalls)
	}
	var calls []*nats.Msg
	waitFor(t, "the capture of every call", func() bool {
		calls = captured()
		return len(calls) >= replayCalls
	})
	if len(calls) != replayCalls {
		t.Fatalf("captured %d calls, want %d", len(calls), replayCalls)
	}

	b.d.Kill9()
	killed := time.Now()
	startRoomHostWith(t, bOpts) // B again, on its state directory; stopped at the end of the test
	// B serves the room again, and its lamp runs: a new call of A's gets a result. Until
	// then, its new calls fail with a typed error: unavailable while B is away, and
	// duplicate_request while they are signed within room.FloorStep of its last call that B
	// ran before the kill (docs/rooms.md, "Retries and exactly-once").
	refused := map[string]int{}
	waitFor(t, "a new call to B after its restart", func() bool {
		r := invoke(0)
		if r.code != exitOK {
			refused[envelopeOf(t, r, "room invoke", false).Error.Code]++
		}
		return r.code == exitOK
	})
	before := effects()
	t.Logf("B killed and answering again in %v (A's new calls refused meanwhile: %v); the lamp ran %d invokes before the replay",
		time.Since(killed).Round(time.Millisecond), refused, before)

	codes := map[string]int{}
	var oldest time.Duration
	for i, m := range calls {
		signed, err := strconv.ParseInt(m.Header.Get("time"), 10, 64)
		if err != nil {
			t.Fatalf("captured call %d has no signing time: %v", i, err)
		}
		age := time.Since(time.UnixMilli(signed))
		// The provider runs on this machine's clock: a call older than the clock window is
		// refused unauthorized whatever B remembers, and would prove nothing.
		if age >= room.ClockWindow-time.Second {
			t.Fatalf("replay %d comes %v after its signing, too close to the clock window of %v to prove anything (a loaded machine?)",
				i, age.Round(time.Millisecond), room.ClockWindow)
		}
		oldest = max(oldest, age)
		reply, err := nc.RequestMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}, room.CallTimeout)
		if err != nil {
			t.Fatalf("replay %d: %v", i, err)
		}
		code := reply.Header.Get("code")
		if code == "" {
			code = "ok (ran again)"
		}
		codes[code]++
	}
	again := effects() - before
	t.Logf("replayed %d calls up to %v after their signing: replies %v; the lamp ran %d again", len(calls), oldest.Round(time.Millisecond), codes, again)
	if again != 0 || codes[room.CodeDuplicateRequest] != len(calls) {
		t.Fatalf("after B's restart, the replay of %d captured calls ran %d again at the lamp; replies %v, want all %s",
			len(calls), again, codes, room.CodeDuplicateRequest)
	}
}

// captureCalls connects to the bus at url as B itself — with the nkey seed in B's state
// directory (seedFile), which a process of the operator's user can read: the embedded bus
// admits nobody else (docs/rooms.md, "The trust boundary") — and copies every message published
// on subject, B's call subject, from then on, as an attacker with B's bus credential would. It
// returns the connection, for the replay (its requests' replies come to B's inbox prefix, the
// only one B's user may subscribe to), and a function giving the copies so far. It is the one
// place where the test joins the bus as the attacker.
func captureCalls(t *testing.T, url, seedFile, host, subject string) (*nats.Conn, func() []*nats.Msg) {
	t.Helper()
	seed, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nats.Name("replay-attacker"), seed, nats.CustomInboxPrefix(bus.InboxPrefix(host)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var mu sync.Mutex
	var msgs []*nats.Msg
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		mu.Lock()
		msgs = append(msgs, m)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc, func() []*nats.Msg {
		mu.Lock()
		defer mu.Unlock()
		return append([]*nats.Msg(nil), msgs...)
	}
}
