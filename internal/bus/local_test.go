package bus_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/room"
)

// startLocal starts a local server (ServerConfig.Host) for host key, closed at cleanup.
func startLocal(t *testing.T, host *room.HostKey) (*bus.Server, nkeys.KeyPair) {
	t.Helper()
	kp, created, err := bus.LoadOrCreateSeed(filepath.Join(t.TempDir(), "bus.nk"))
	if err != nil || !created {
		t.Fatalf("LoadOrCreateSeed: %v %v", created, err)
	}
	s, err := bus.StartServer(bus.ServerConfig{StateDir: t.TempDir(), Host: &bus.LocalHost{ID: string(host.ID()), Key: kp}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, kp
}

func dialCfg(t *testing.T, cfg bus.DialConfig) *bus.Conn {
	t.Helper()
	c, err := bus.Dial(cfg)
	if err != nil {
		t.Fatalf("Dial %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestLocalServerAdmitsItsHostsOnly pins the embedded bus's authentication: a connection
// without credentials, with an unknown nkey, or with the embedding host's own nkey over the
// network is refused; the embedding host (in process) and an admitted host (over loopback)
// connect, each confined to its own rooms, inbox and provider subject, and neither may
// delete a room bucket, which the warden may.
func TestLocalServerAdmitsItsHostsOnly(t *testing.T) {
	ka, _ := room.GenerateHostKey()
	kb, _ := room.GenerateHostKey()
	s, akp := startLocal(t, ka)
	url := s.ClientURL()

	if nc, err := nats.Connect(url, nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was accepted")
	} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("anonymous: %v, want an authorization error", err)
	}
	stranger, _ := nkeys.CreateUser()
	if _, err := bus.Dial(bus.DialConfig{URL: url, Name: "stranger", Nkey: stranger}); err == nil {
		t.Fatal("a connection with an unknown nkey was accepted")
	}
	if _, err := bus.Dial(bus.DialConfig{URL: url, Name: "self", Nkey: akp}); err == nil {
		t.Fatal("the embedding host's nkey was accepted over the network")
	}
	if _, ok := (&bus.Server{}).WardenDialConfig(); ok {
		t.Fatal("a server without a local host has a warden")
	}

	bkp, _ := nkeys.CreateUser()
	bpub, _ := bkp.PublicKey()
	apub, _ := akp.PublicKey()
	users := []bus.FabricUser{
		{Host: string(ka.ID()), Nkey: apub, Rooms: []string{"living"}, Owns: []string{"living"}},
		{Host: string(kb.ID()), Nkey: bpub, Rooms: []string{"living"}},
	}
	if err := s.SetUsers(users[1:]); err == nil {
		t.Fatal("SetUsers without the embedding host was accepted")
	}
	if err := s.SetUsers(append(users, bus.FabricUser{Host: string(ka.ID()), Nkey: bpub})); err == nil {
		t.Fatal("SetUsers with a repeated host was accepted")
	}
	if err := s.SetUsers(users); err != nil {
		t.Fatal(err)
	}
	a := dialCfg(t, s.HostDialConfig())
	b := dialCfg(t, bus.DialConfig{URL: url, Name: string(kb.ID()), InboxPrefix: bus.InboxPrefix(string(kb.ID())), Nkey: bkp})
	wcfg, ok := s.WardenDialConfig()
	if !ok {
		t.Fatal("no warden")
	}
	w := dialCfg(t, wcfg)
	if _, err := bus.Dial(bus.DialConfig{URL: url, Name: "warden", Nkey: wcfg.Nkey}); err == nil {
		t.Fatal("the warden's nkey was accepted over the network")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []*bus.Conn{a, b} {
		if _, err := c.Bucket(ctx, busport.BucketConfig{Name: room.RoomsBucket, MaxValueBytes: room.MaxRecordBytes}); err != nil {
			t.Fatalf("a host opens the rooms bucket: %v (refusals %d)", err, c.Refusals())
		}
	}

	// B may not serve A's provider subject nor read A's inbox.
	for i, subj := range []string{room.CallSubject("living", ka.ID()), bus.InboxPrefix(string(ka.ID())) + ".x"} {
		sub, err := b.Serve(subj, 1, nopHandler{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Stop()
		if !waitUntil(5*time.Second, func() bool { return b.Refusals() >= uint64(i+1) }) {
			t.Fatalf("B subscribed to %s (refusals %d)", subj, b.Refusals())
		}
	}
	// Neither host may delete the rooms stream; the warden may.
	for _, c := range []*bus.Conn{a, b} {
		before := c.Refusals()
		dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Request(dctx, "$JS.API.STREAM.DELETE.KV_"+room.RoomsBucket, nil)
		dcancel()
		if err == nil || !waitUntil(5*time.Second, func() bool { return c.Refusals() > before }) {
			t.Fatalf("a host deleted the rooms stream: %v (refusals %d)", err, c.Refusals())
		}
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	rep, err := w.Request(dctx, "$JS.API.STREAM.DELETE.KV_"+room.RoomsBucket, nil)
	if err != nil || !strings.Contains(string(rep), `"success":true`) {
		t.Fatalf("the warden's delete: %s %v", rep, err)
	}

	// Removing B closes it out: its next connection is refused.
	if err := s.SetUsers(users[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Dial(bus.DialConfig{URL: url, Name: "b again", Nkey: bkp}); err == nil {
		t.Fatal("a removed host connected")
	}
}

func TestLoadOrCreateSeed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bus.nk")
	kp, created, err := bus.LoadOrCreateSeed(path)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("seed file: %v %v, want mode 0600", fi.Mode(), err)
	}
	again, created, err := bus.LoadOrCreateSeed(path)
	p1, _ := kp.PublicKey()
	p2, _ := again.PublicKey()
	if err != nil || created || p1 != p2 {
		t.Fatalf("reload: %v %v, same key %v", created, err, p1 == p2)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bus.LoadOrCreateSeed(path); !errors.Is(err, bus.ErrConfig) {
		t.Fatalf("a 0644 seed: %v, want ErrConfig", err)
	}
	link := filepath.Join(dir, "link.nk")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bus.LoadOrCreateSeed(link); !errors.Is(err, bus.ErrConfig) {
		t.Fatalf("a linked seed: %v, want ErrConfig", err)
	}
	junk := filepath.Join(dir, "junk.nk")
	if err := os.WriteFile(junk, []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bus.LoadOrCreateSeed(junk); !errors.Is(err, bus.ErrConfig) {
		t.Fatalf("a junk seed: %v, want ErrConfig", err)
	}
	acct, _ := nkeys.CreateAccount()
	aseed, _ := acct.Seed()
	other := filepath.Join(dir, "acct.nk")
	if err := os.WriteFile(other, aseed, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bus.LoadOrCreateSeed(other); !errors.Is(err, bus.ErrConfig) {
		t.Fatalf("an account seed: %v, want ErrConfig", err)
	}
}

// FuzzLoadSeed: a seed file's content either loads as an nkey user (whose public key is
// valid) or is refused with ErrConfig; it never loads anything else.
func FuzzLoadSeed(f *testing.F) {
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	f.Add(append(seed, '\n'))
	f.Add([]byte("not a seed\n"))
	acct, _ := nkeys.CreateAccount()
	aseed, _ := acct.Seed()
	f.Add(aseed)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "bus.nk")
		_ = os.Remove(path)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		kp, created, err := bus.LoadOrCreateSeed(path)
		if created {
			t.Fatal("an existing file was replaced")
		}
		if err != nil {
			if !errors.Is(err, bus.ErrConfig) {
				t.Fatalf("refused with %v, want ErrConfig", err)
			}
			return
		}
		if _, err := bus.NkeyPublic(kp); err != nil {
			t.Fatalf("loaded a key that is no nkey user: %v", err)
		}
	})
}

// TestLocalServerBoundsConnections: the client port takes connections from anyone who can
// reach it, and holds one that never authenticates for the auth timeout; past MaxConns the
// server refuses the next at once, so that a stranger's flood cannot hold the daemon's
// descriptors, and an admitted host connects again once the flood is gone.
func TestLocalServerBoundsConnections(t *testing.T) {
	const bound = 8
	ka, _ := room.GenerateHostKey()
	kp, _, err := bus.LoadOrCreateSeed(filepath.Join(t.TempDir(), "bus.nk"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := bus.StartServer(bus.ServerConfig{StateDir: t.TempDir(), MaxConns: bound, Host: &bus.LocalHost{ID: string(ka.ID()), Key: kp}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := strings.TrimPrefix(s.ClientURL(), "nats://")
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range bound {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
		// The server's INFO: the connection is accepted, unauthenticated.
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
			t.Fatalf("connection %d: %q %v", len(flood), line, err)
		}
	}
	// The server sends its INFO before it registers the connection, and counts only the
	// registered ones against its bound: wait until it has them all.
	for deadline := time.Now().Add(10 * time.Second); bus.NumClients(s) < bound; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server registered %d of the %d connections", bus.NumClients(s), bound)
		}
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	over.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(over)
	if !strings.Contains(string(got), "maximum connections exceeded") {
		t.Fatalf("connection %d got %q, want it refused at once", bound+1, got)
	}
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	// The host connects again once the server saw the flood's connections close.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := bus.Dial(s.HostDialConfig())
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host cannot connect after the flood: %v", err)
		}
	}
}

// heldHandler answers each request with "ok" once release is closed, telling entered first.
type heldHandler struct{ entered, release chan struct{} }

func (h heldHandler) Serve(context.Context, string, []byte) []byte {
	h.entered <- struct{}{}
	<-h.release
	return []byte("ok")
}

func (h heldHandler) Overloaded(string, []byte) []byte { return nil }

// TestAnswerAfterAUsersReload holds a request at its provider while the server's users are
// reloaded (the provider's host joined another room): the broker forgets that the provider
// may answer it, and the answer, sent after the reload, still reaches the caller because the
// provider re-arms it first. Before, it was refused and the caller timed out, although a call
// that waited for its operator had run.
func TestAnswerAfterAUsersReload(t *testing.T) {
	t.Run("reloaded", func(t *testing.T) { answerLate(t, true) })
	// A re-armed answer that no reload made necessary arrives too.
	t.Run("not reloaded", func(t *testing.T) { answerLate(t, false) })
}

func answerLate(t *testing.T, reload bool) {
	ka, _ := room.GenerateHostKey()
	kb, _ := room.GenerateHostKey()
	s, akp := startLocal(t, ka)
	bkp, _ := nkeys.CreateUser()
	bpub, _ := bkp.PublicKey()
	apub, _ := akp.PublicKey()
	users := []bus.FabricUser{
		{Host: string(ka.ID()), Nkey: apub, Rooms: []string{"living"}, Owns: []string{"living"}},
		{Host: string(kb.ID()), Nkey: bpub, Rooms: []string{"living"}},
	}
	if err := s.SetUsers(users); err != nil {
		t.Fatal(err)
	}
	a := dialCfg(t, s.HostDialConfig())
	bus.SetRearmAfter(a, 0) // every answer is late here
	b := dialCfg(t, bus.DialConfig{URL: s.ClientURL(), Name: string(kb.ID()), InboxPrefix: bus.InboxPrefix(string(kb.ID())), Nkey: bkp})
	h := heldHandler{entered: make(chan struct{}, 1), release: make(chan struct{})}
	sub, err := a.Serve(room.CallSubject("living", ka.ID()), 1, h)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type answer struct {
		data []byte
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		data, err := b.Request(ctx, room.CallSubject("living", ka.ID()), []byte("call"))
		got <- answer{data, err}
	}()
	<-h.entered
	if reload {
		users[0].Rooms, users[0].Owns = []string{"kitchen", "living"}, []string{"kitchen", "living"}
		if err := s.SetUsers(users); err != nil {
			t.Fatal(err)
		}
	}
	close(h.release)
	if r := <-got; r.err != nil || string(r.data) != "ok" {
		t.Fatalf("the answer after the reload: %q, %v (A's refusals %d)", r.data, r.err, a.Refusals())
	}
	if n := a.Refusals(); n != 0 {
		t.Fatalf("A had %d refusals", n)
	}
}

// TestLocalServerStatus pins the status of a server without a fabric: one local node whose
// JetStream is not clustered, shown as such (it read "jetstream: leader , cluster of 1").
func TestLocalServerStatus(t *testing.T) {
	k, _ := room.GenerateHostKey()
	s, _ := startLocal(t, k)
	st, err := s.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode != "local" || !st.JetStream.Enabled || st.JetStream.Leader != "" || len(st.Routes) != 0 || st.Certificate != nil {
		t.Fatalf("status: %+v", st)
	}
	var out strings.Builder
	if err := bus.WriteStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	if text := out.String(); !strings.Contains(text, " (local), ") || !strings.Contains(text, "jetstream: this node alone, ") {
		t.Fatalf("status text:\n%s", text)
	}
}
