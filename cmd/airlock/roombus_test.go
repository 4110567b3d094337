package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/protocol"
)

type busHostsData struct {
	Hosts []struct {
		HostID string   `json:"hostId"`
		Nkey   string   `json:"nkey"`
		Rooms  []string `json:"rooms"`
		Owns   []string `json:"owns"`
	} `json:"hosts"`
}

// TestRoomBusAdmitsItsHostsOnly is the attack on real binaries: a process with no
// credentials (this test, and the user nobody when it runs as root) connects to a running
// airlockd's embedded bus. It must be refused; so must a wrong nkey. A host admitted through
// the owner socket (as airlockd --nats-via is) is confined: it cannot serve another host's
// provider subject, subscribe to its inbox or delete the rooms stream, and the room keeps
// working; the operator lists the daemons admitted and removes one, which is then closed out.
func TestRoomBusAdmitsItsHostsOnly(t *testing.T) {
	a := startRoomHost(t)
	var sa roomStatusData
	a.data(&sa, "room", "status")
	b := startRoomHost(t, "--nats-via", a.d.Socket)
	var sb roomStatusData
	b.data(&sb, "room", "status")
	if sb.Embedded || sb.NATSURL != sa.NATSURL {
		t.Fatalf("B's room status %+v", sb)
	}
	a.cli("", "room", "create", "home").wantCode(t, exitOK)
	var inv struct {
		Code string `json:"code"`
	}
	a.data(&inv, "room", "invite", "home")
	b.cli(inv.Code+"\n", "room", "join", "-").wantCode(t, exitOK)

	// No credentials: refused (before, this connected and could subscribe to "airlock.>").
	if nc, err := nats.Connect(sa.NATSURL, nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a connection without credentials to the embedded bus was accepted")
	}
	if os.Geteuid() == 0 {
		connectAsNobody(t, sa.NATSURL)
	}
	stranger, _ := nkeys.CreateUser()
	if _, err := bus.Dial(bus.DialConfig{URL: sa.NATSURL, Name: "stranger", Nkey: stranger}); err == nil {
		t.Fatal("a connection with an nkey the bus never admitted was accepted")
	}

	var hosts busHostsData
	a.data(&hosts, "room", "bus-hosts")
	if len(hosts.Hosts) != 1 || hosts.Hosts[0].HostID != sb.HostID || strings.Join(hosts.Hosts[0].Rooms, ",") != "home" || len(hosts.Hosts[0].Owns) != 0 {
		t.Fatalf("A's bus hosts %+v", hosts)
	}
	b.refused("no_embedded_bus", "room", "bus-hosts")

	// A host admitted through A's owner socket, a member of home.
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	var idb [32]byte
	rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	c, err := client.Dial(context.Background(), a.d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Call(ctx, client.Command{Operation: protocol.OpAdmitBusHost,
		Payload: &protocol.AdmitBusHostPayload{HostID: id, Nkey: pub, Rooms: []protocol.BusHostRoom{{Room: "home"}}}})
	if err != nil || r.Err() != nil {
		t.Fatalf("admitBusHost: %v %v", err, r.Err())
	}
	r, err = c.Call(ctx, client.Command{Operation: protocol.OpAdmitBusHost,
		Payload: &protocol.AdmitBusHostPayload{HostID: id, Nkey: pub, Rooms: []protocol.BusHostRoom{{Room: "home", Owner: true}}}})
	if err != nil || r.Err() == nil || r.Error.Code != "room_exists" {
		t.Fatalf("admitBusHost claiming A's room: %v %+v", err, r.Error)
	}
	m, err := bus.Dial(bus.DialConfig{URL: sa.NATSURL, Name: id, Nkey: kp, InboxPrefix: bus.InboxPrefix(id)})
	if err != nil {
		t.Fatalf("the admitted host's connection: %v", err)
	}
	defer m.Close()
	for i, subj := range []string{"airlock.room.home.call." + sa.HostID, bus.InboxPrefix(sa.HostID) + ".x", "airlock.>"} {
		sub, err := m.Serve(subj, 1, nopServe{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Stop()
		waitFor(t, "the broker's refusal of "+subj, func() bool { return m.Refusals() >= uint64(i+1) })
	}
	dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
	_, err = m.Request(dctx, "$JS.API.STREAM.DELETE.KV_airlock_rooms", nil)
	dcancel()
	if err == nil {
		t.Fatal("the admitted host's stream deletion was answered")
	}
	waitFor(t, "the broker's refusal of the deletion", func() bool { return m.Refusals() >= 4 })
	// The room is intact: a new room is created and B still sees its room whole.
	a.cli("", "room", "create", "attic").wantCode(t, exitOK)
	var show struct {
		Members []struct{} `json:"members"`
	}
	b.data(&show, "room", "show", "home")
	if len(show.Members) != 2 {
		t.Fatalf("B's room %+v", show)
	}

	// Removed, the host's connection closes and it cannot connect again.
	a.cli("", "room", "bus-remove", id).wantCode(t, exitOK)
	a.refused("unknown_bus_host", "room", "bus-remove", id)
	waitFor(t, "the removed host's connection to close", func() bool { return !m.Connected() })
	if _, err := bus.Dial(bus.DialConfig{URL: sa.NATSURL, Name: id, Nkey: kp}); err == nil {
		t.Fatal("a removed host connected")
	}
	a.data(&hosts, "room", "bus-hosts")
	if len(hosts.Hosts) != 1 {
		t.Fatalf("A's bus hosts after the removal %+v", hosts)
	}

	// The seeds stay in their 0600 files: in no log and no answer.
	listing := a.cli("", "room", "bus-hosts", "--json").stdout + b.cli("", "room", "status", "--json").stdout
	for _, h := range []*roomHost{a, b} {
		path := filepath.Join(h.d.StateDir, "bus.nk")
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", path, fi, err)
		}
		seed, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.TrimSpace(string(seed))
		if !strings.HasPrefix(s, "SU") {
			t.Fatalf("%s holds no user seed", path)
		}
		for _, out := range []string{a.d.Stderr(), b.d.Stderr(), listing} {
			if strings.Contains(out, s) {
				t.Fatalf("the seed of %s was printed", path)
			}
		}
	}
}

type nopServe struct{}

func (nopServe) Serve(context.Context, string, []byte) []byte { return []byte("x") }
func (nopServe) Overloaded(string, []byte) []byte             { return nil }

// connectAsNobody tries the bus as user nobody, with the nc-like probe of python3 when it is
// installed: a CONNECT without credentials must be answered with an authorization error.
func connectAsNobody(t *testing.T, url string) {
	t.Helper()
	// The system's python3: an interpreter under root's home is not nobody's to run.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Log("/usr/bin/python3 not installed: the probe as nobody is skipped")
		return
	}
	hostport := strings.TrimPrefix(url, "nats://")
	script := `
import socket, sys
h, p = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((h, int(p)), timeout=5)
f = s.makefile("rb")
f.readline()  # INFO
s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
print(f.readline().decode().strip())
`
	cmd := exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", python, "-c", script, hostport)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Logf("setpriv unavailable (%v): the probe as nobody is skipped", err)
		return
	}
	if got := strings.TrimSpace(string(out)); !strings.Contains(got, "Authorization Violation") {
		t.Fatalf("as nobody, the bus answered %q, want an authorization violation", got)
	}
}
