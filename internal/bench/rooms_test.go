package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// BenchmarkRoomInvoke measures a room invoke from host B's owner socket through the bus to
// host A's provider and its go-lamp adapter and back (B signs, A verifies, authorizes twice,
// runs the adapter and signs the reply, B verifies it), with both daemons in this process and
// A's embedded NATS server between them. Two baselines are timed in the same run, interleaved
// call by call:
//
//   - bare: a NATS request/reply of a signed call's size to an echo handler on the same
//     embedded server, from a second connection;
//   - local: invokeCapability of the same action on A's own socket, the adapter round trip
//     without the room.
//
// It reports p50 and p99 of each, the room call's mean (where A's durable raises of B's floor
// lease, one fsync about once per room.FloorStep, show), the room p50 as a ratio to bare +
// local (the target of issue #12 is ≤ 1.5), and how many durable raises the timed calls made:
//
//	go test -run '^$' -bench RoomInvoke -benchtime 3000x ./internal/bench/
func BenchmarkRoomInvoke(b *testing.B) {
	lamp := daemontest.Build(b, "./examples/adapters/go-lamp")
	ctx := context.Background()
	rootA, rootB := daemontest.ShortDir(b), daemontest.ShortDir(b)
	sockA, sockB := filepath.Join(rootA, "a.sock"), filepath.Join(rootB, "b.sock")
	raises := &raiseCounter{}
	a, err := daemon.Start(daemon.Config{SocketPath: sockA, StateDir: filepath.Join(rootA, "state"), Rooms: &daemon.RoomsConfig{}, Logger: slog.New(raises)})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Shutdown(ctx)
	la := dialLine(b, sockA)
	defer la.nc.Close()
	registerLamp(b, la, lamp)
	var st struct {
		HostID  string `json:"hostId"`
		NATSURL string `json:"natsUrl"`
	}
	roomData(b, la, "roomStatus", `{}`, &st, true)
	bd, err := daemon.Start(daemon.Config{SocketPath: sockB, StateDir: filepath.Join(rootB, "state"), Rooms: &daemon.RoomsConfig{NATSVia: sockA}})
	if err != nil {
		b.Fatal(err)
	}
	defer bd.Shutdown(ctx)
	lb := dialLine(b, sockB)
	defer lb.nc.Close()
	roomData(b, lb, "roomStatus", `{}`, nil, true)

	roomData(b, la, "createRoom", `{"room":"bench"}`, nil, false)
	var inv struct {
		Code string `json:"code"`
	}
	roomData(b, la, "inviteRoom", `{"room":"bench"}`, &inv, false)
	roomData(b, lb, "joinRoom", `{"code":"`+inv.Code+`"}`, nil, false)
	roomData(b, la, "publishCapability", `{"room":"bench","capabilityId":"desk_lamp","actions":["set_power"]}`, nil, false)

	roomLine := []byte(`{"protocolVersion":"2.0","requestId":"i","operation":"invokeRoomCapability","payload":{"room":"bench","provider":"` +
		st.HostID + `","capabilityId":"desk_lamp","action":"set_power","args":{"on":true}}}` + "\n")
	localLine := []byte(`{"protocolVersion":"2.0","requestId":"l","operation":"invokeCapability",` +
		`"payload":{"capabilityId":"desk_lamp","action":"set_power","args":{"on":true}}}` + "\n")
	invoke := func(c *lineConn, line []byte, what string) {
		if resp := c.roundTrip(b, line); !bytes.Contains(resp, []byte(`"ok":true`)) {
			b.Fatalf("%s: %s", what, resp)
		}
	}

	// The bare request travels the same embedded server as two hosts admitted to it, each
	// authenticated as its nkey user with a host's permissions: a provider serving its call
	// subject and a member of the room calling it.
	echoHost, echoSeed := benchHost(b, la, "")
	clientHost, clientSeed := benchHost(b, la, `,"rooms":[{"room":"bench"}]`)
	server, err := bus.Dial(bus.DialConfig{URL: st.NATSURL, Name: "bench-echo", Nkey: echoSeed, InboxPrefix: bus.InboxPrefix(echoHost)})
	if err != nil {
		b.Fatal(err)
	}
	defer server.Close()
	echoSubject := "airlock.room.bench.call." + echoHost
	echoSub, err := server.Serve(echoSubject, 64, echoHandler{})
	if err != nil {
		b.Fatal(err)
	}
	defer echoSub.Stop()
	client, err := bus.Dial(bus.DialConfig{URL: st.NATSURL, Name: "bench-client", Nkey: clientSeed, InboxPrefix: bus.InboxPrefix(clientHost)})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	payload := make([]byte, 390) // about a call's size: its header fields and args (388 bytes)
	bare := func() {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := client.Request(rctx, echoSubject, payload); err != nil {
			b.Fatal(err)
		}
	}

	for range 200 {
		invoke(lb, roomLine, "room invoke")
		bare()
		invoke(la, localLine, "local invoke")
	}
	rooms, bares, locals := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	raisesBefore := raises.n.Load()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		invoke(lb, roomLine, "room invoke")
		t1 := time.Now()
		bare()
		t2 := time.Now()
		invoke(la, localLine, "local invoke")
		t3 := time.Now()
		rooms, bares, locals = append(rooms, t1.Sub(t0)), append(bares, t2.Sub(t1)), append(locals, t3.Sub(t2))
	}
	b.StopTimer()
	var sum time.Duration
	for _, d := range rooms {
		sum += d
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(rooms)), "room-mean-ns")
	b.ReportMetric(float64(raises.n.Load()-raisesBefore), "floor-raises")
	r50, r99 := percentile(rooms, 50), percentile(rooms, 99)
	n50, n99 := percentile(bares, 50), percentile(bares, 99)
	l50, l99 := percentile(locals, 50), percentile(locals, 99)
	b.ReportMetric(r50, "room-p50-ns")
	b.ReportMetric(r99, "room-p99-ns")
	b.ReportMetric(n50, "bare-p50-ns")
	b.ReportMetric(n99, "bare-p99-ns")
	b.ReportMetric(l50, "local-p50-ns")
	b.ReportMetric(l99, "local-p99-ns")
	b.ReportMetric(r50/(n50+l50), "ratio-p50")
	b.ReportMetric(r99/(n99+l99), "ratio-p99")
}

// benchHost admits a new host to A's embedded bus through A's owner socket (admitBusHost, as
// airlockd --nats-via does), with rooms (a JSON member, or ""), and returns its id and nkey.
func benchHost(b *testing.B, la *lineConn, rooms string) (string, nkeys.KeyPair) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		b.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	var id [32]byte
	rand.Read(id[:])
	host := hex.EncodeToString(id[:])
	roomData(b, la, "admitBusHost", `{"hostId":"`+host+`","nkey":"`+pub+`"`+rooms+`}`, nil, false)
	return host, kp
}

// roomData sends a room operation and decodes its data into v; with wait, it retries while
// the room service is starting.
func roomData(b *testing.B, c *lineConn, op, payload string, v any, wait bool) {
	line := []byte(`{"protocolVersion":"2.0","requestId":"s","operation":"` + op + `","payload":` + payload + "}\n")
	for deadline := time.Now().Add(20 * time.Second); ; {
		var resp struct {
			OK   bool            `json:"ok"`
			Data json.RawMessage `json:"data"`
		}
		raw := c.roundTrip(b, line)
		if err := json.Unmarshal(raw, &resp); err != nil {
			b.Fatalf("%s: %v: %s", op, err, raw)
		}
		if resp.OK {
			if v != nil {
				if err := json.Unmarshal(resp.Data, v); err != nil {
					b.Fatal(err)
				}
			}
			return
		}
		if !wait || time.Now().After(deadline) {
			b.Fatalf("%s: %s", op, raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// raiseCounter is a log handler that counts the durable raises of a provider's call floor
// leases, which airlockd logs at debug level (roomhost's floors), and drops every record.
type raiseCounter struct{ n atomic.Int64 }

func (c *raiseCounter) Enabled(context.Context, slog.Level) bool { return true }

func (c *raiseCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "room call floor raised" {
		c.n.Add(1)
	}
	return nil
}

func (c *raiseCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *raiseCounter) WithGroup(string) slog.Handler      { return c }

type echoHandler struct{}

func (echoHandler) Serve(_ context.Context, _ string, p []byte) []byte { return p[:1] }
func (echoHandler) Overloaded(string, []byte) []byte                   { return []byte("busy") }
