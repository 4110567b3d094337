package room

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustKey(t testing.TB) *HostKey {
	t.Helper()
	k, err := GenerateHostKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// scriptedInvoker is the capability supervisor's stand-in: it counts calls, returns a fixed
// result per capability, and can hold calls until released.
type scriptedInvoker struct {
	mu      sync.Mutex
	calls   map[string]int // "capability/action" → count
	hold    chan struct{}  // when set, calls wait for it (or ctx)
	entered chan struct{}  // when set, each call sends on it first
	result  json.RawMessage
	err     error
}

func newInvoker() *scriptedInvoker {
	return &scriptedInvoker{calls: make(map[string]int), result: json.RawMessage(`{"ok":true}`)}
}

func (s *scriptedInvoker) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[key]
}

func (s *scriptedInvoker) run(ctx context.Context, key string) (json.RawMessage, error) {
	s.mu.Lock()
	s.calls[key]++
	hold, entered, result, err := s.hold, s.entered, s.result, s.err
	s.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return result, err
}

func (s *scriptedInvoker) Observe(ctx context.Context, capability string) (json.RawMessage, error) {
	return s.run(ctx, capability+"/")
}

func (s *scriptedInvoker) Invoke(ctx context.Context, capability, action string, args json.RawMessage) (json.RawMessage, error) {
	if !json.Valid(args) {
		return nil, errors.New("scripted invoker: invalid args")
	}
	return s.run(ctx, capability+"/"+action)
}

// startingInvoker is a scriptedInvoker as a StartInvoker: each call ends on a goroutine of
// its own, as the capability supervisor's end on its adapter's reader.
type startingInvoker struct{ *scriptedInvoker }

func (s startingInvoker) StartObserve(ctx context.Context, capability string, done func(json.RawMessage, error)) {
	go func() { done(s.Observe(ctx, capability)) }()
}

func (s startingInvoker) StartInvoke(ctx context.Context, capability, action string, args json.RawMessage, done func(json.RawMessage, error)) {
	go func() { done(s.Invoke(ctx, capability, action, args)) }()
}

// withStartInvoker makes newFixture give its provider a startingInvoker.
var withStartInvoker bool

// fixture is one provider host A, owner of room r1 with member B; C is no member. dir is A's
// directory; peers is the directory the callers use, with the same rosters. Both hold the key
// records of A, B and C.
type fixture struct {
	a, b, c  *HostKey
	dir      *Directory
	peers    *Directory
	pubs     *Publications
	inv      *scriptedInvoker
	floors   *memFloors
	appr     *Approvals
	p        *Provider
	records  []CallRecord
	recordMu sync.Mutex
}

const testRoom = "r1"

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{a: mustKey(t), b: mustKey(t), c: mustKey(t), dir: NewDirectory(), peers: NewDirectory(),
		pubs: NewPublications(), inv: newInvoker(), floors: newMemFloors()}
	f.appr = NewApprovals(nil)
	for _, d := range []*Directory{f.dir, f.peers} {
		if err := d.Trust(testRoom, f.a.ID()); err != nil {
			t.Fatal(err)
		}
	}
	f.setRoster(t, 1, f.a.ID(), f.b.ID())
	for _, k := range []*HostKey{f.a, f.b, f.c} {
		f.applyKey(t, k, time.Now())
	}
	if err := f.pubs.Publish(Publication{Room: testRoom, Capability: "light", Actions: []string{"set_color"}, Observe: true}); err != nil {
		t.Fatal(err)
	}
	if err := f.pubs.Publish(Publication{Room: testRoom, Capability: "printer", Observe: false, ApproveEach: true}); err != nil {
		t.Fatal(err)
	}
	var inv Invoker = f.inv
	if withStartInvoker {
		inv = startingInvoker{f.inv}
	}
	p, err := NewProvider(ProviderConfig{
		Key: f.a, Directory: f.dir, Publications: f.pubs, Invoker: inv, Approvals: f.appr, Floors: f.floors,
		ErrorCode: func(err error) string { return "unsupported_action" },
		OnCall: func(r CallRecord) {
			f.recordMu.Lock()
			f.records = append(f.records, r)
			f.recordMu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// restart replaces the provider with a new one of the same configuration, as airlockd started
// again on the same state directory after a kill -9: only what f.floors made durable is left
// of the old one's memory.
func (f *fixture) restart(t testing.TB) {
	t.Helper()
	p, err := NewProvider(f.p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
}

// memFloors is the durable floor store's stand-in: a map that outlives the provider (see
// fixture.restart). It counts raises, can hold them until released, and can fail.
type memFloors struct {
	mu      sync.Mutex
	leases  map[HostID]time.Time
	raises  int
	hold    chan struct{} // when set, Raise waits for it before it writes
	err     error         // when set, Raise fails with it and writes nothing
	loadErr error
}

func newMemFloors() *memFloors { return &memFloors{leases: make(map[HostID]time.Time)} }

func (m *memFloors) Load(since time.Time) (map[HostID]time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.loadErr != nil {
		return nil, m.loadErr
	}
	out := make(map[HostID]time.Time)
	for id, l := range m.leases {
		if l.After(since) {
			out[id] = l
		}
	}
	return out, nil
}

func (m *memFloors) Raise(caller HostID, lease, since time.Time) error {
	m.mu.Lock()
	m.raises++
	hold, err := m.hold, m.err
	m.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if lease.After(m.leases[caller]) {
		m.leases[caller] = lease
	}
	return nil
}

func (m *memFloors) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.raises
}

func (f *fixture) setRoster(t testing.TB, version uint64, members ...HostID) {
	t.Helper()
	r := Roster{Room: testRoom, Title: "Living room", Owner: f.a.ID(), Version: version}
	for _, m := range members {
		r.Members = append(r.Members, Member{Host: m})
	}
	data, err := SignRoster(f.a, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Directory{f.dir, f.peers} {
		if _, err := d.ApplyRoster(testRoom, data); err != nil {
			t.Fatal(err)
		}
	}
}

// applyKey gives both directories k's key record written at t.
func (f *fixture) applyKey(t testing.TB, k *HostKey, at time.Time) {
	t.Helper()
	data, err := SignKeyRecord(k, testRoom, at)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Directory{f.dir, f.peers} {
		if err := d.ApplyKeyRecord(testRoom, k.ID(), data); err != nil {
			t.Fatal(err)
		}
	}
}

func invoke(capability, action, args string) Request {
	return Request{Room: testRoom, Capability: capability, Operation: Invoke, Action: action, Args: json.RawMessage(args)}
}

// send delivers a prepared call to the provider as the bus would and opens the reply as the
// caller would.
func (f *fixture) send(ctx context.Context, prep *Prepared, now time.Time) (json.RawMessage, error) {
	data := f.p.serve(ctx, CallSubject(prep.call.Room, prep.call.Provider), prep.data, now)
	r, err := openReply(data, prep.call, prep.link)
	if err != nil {
		return nil, err
	}
	if r.Code != "" {
		return nil, &Error{Code: r.Code, Remote: true}
	}
	return r.Result, nil
}

// prepare signs req as key at now, addressed to A unless it names a provider.
func (f *fixture) prepare(t testing.TB, key *HostKey, req Request, now time.Time) *Prepared {
	t.Helper()
	if req.Provider == "" {
		req.Provider = f.a.ID()
	}
	prep, err := NewCaller(key, nil, f.peers).Prepare(req, now)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return prep
}

// sealDirect authenticates req as key to provider as Prepare would, but with provider's key
// taken from provider itself rather than a directory, for calls no directory would let a
// caller make (another room, a provider that is no member).
func sealDirect(t testing.TB, key, provider *HostKey, req Request, now time.Time) *Prepared {
	t.Helper()
	if req.RequestID == "" {
		req.RequestID = "direct"
	}
	call := &Call{Room: req.Room, Provider: provider.ID(), Capability: req.Capability, Operation: req.Operation,
		Action: req.Action, Args: req.Args, RequestID: req.RequestID, Timeout: CallTimeout}
	link, err := key.link(key.ID(), provider.ID(), provider.kx.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	data, err := sealCall(key, link, call, now)
	if err != nil {
		t.Fatal(err)
	}
	return &Prepared{call: call, link: link, data: data}
}

// call signs req as key at now and delivers it.
func (f *fixture) call(t testing.TB, key *HostKey, req Request, now time.Time) (json.RawMessage, error) {
	t.Helper()
	return f.send(context.Background(), f.prepare(t, key, req, now), now)
}

func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	if CodeOf(err) != code {
		t.Fatalf("error = %v, want code %s", err, code)
	}
}
