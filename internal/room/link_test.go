package room

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// withKX returns k's identity with another X25519 key: the same host after a key change.
func withKX(k *HostKey, x byte) *HostKey {
	nk := &HostKey{priv: k.priv, id: k.id}
	nk.setKX(bytes.Repeat([]byte{x}, 32))
	return nk
}

func TestLinkKeysAgreeAndAreSeparatedByDirectionAndPurpose(t *testing.T) {
	a, b, c := mustKey(t), mustKey(t), mustKey(t)
	ab := mustLink(t, a, b)
	// B derives the same link from its side.
	ab2, err := b.link(a.ID(), b.ID(), a.kx.PublicKey())
	if err != nil || *ab2 != *ab {
		t.Fatalf("the two ends disagree: %v", err)
	}
	ba, ac := mustLink(t, b, a), mustLink(t, a, c)
	keys := map[[32]byte]string{}
	for name, k := range map[string][32]byte{
		"a→b call": ab.call, "a→b reply": ab.reply, "b→a call": ba.call, "b→a reply": ba.reply,
		"a→c call": ac.call, "a→c reply": ac.reply,
	} {
		if other, dup := keys[k]; dup {
			t.Fatalf("%s and %s share a key", name, other)
		}
		keys[k] = name
	}
	// A host's link to itself works (a host calls its own publications) and still keeps
	// calls and replies apart.
	aa := mustLink(t, a, a)
	if aa.call == aa.reply {
		t.Fatal("self link with one key for calls and replies")
	}
	if _, err := a.link(b.ID(), c.ID(), c.kx.PublicKey()); CodeOf(err) != CodeUnauthorized {
		t.Fatalf("a link between two other hosts: %v", err)
	}
	// The X25519 key is derived from the seed: stable across loads of the same key file.
	again := newHostKey(a.priv.Seed())
	if again.kxPub != a.kxPub {
		t.Fatal("the X25519 key changed across loads of one seed")
	}
}

func TestLinkCacheIsBounded(t *testing.T) {
	a := mustKey(t)
	for range maxLinks + 10 {
		p := mustKey(t)
		mustLink(t, a, p)
	}
	if n := a.cachedLinks(); n != maxLinks {
		t.Fatalf("%d links cached, bound %d", n, maxLinks)
	}
}

func TestAPeersChangedKeyReplacesTheOldOne(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	if _, err := f.call(t, f.b, invoke("light", "set_color", `{}`), now); err != nil {
		t.Fatal(err)
	}
	// B's host comes back with another X25519 key and a newer key record.
	b2 := withKX(f.b, 0x42)
	rec, err := SignKeyRecord(b2, testRoom, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.dir.ApplyKeyRecord(testRoom, f.b.ID(), rec); err != nil {
		t.Fatal(err)
	}
	_, err = f.call(t, f.b, invoke("light", "set_color", `{}`), now)
	wantCode(t, err, CodeUnauthorized)
	if _, err := f.call(t, b2, invoke("light", "set_color", `{}`), now); err != nil {
		t.Fatalf("the new key: %v", err)
	}
	// A replay of the old record changes nothing: it is older.
	old, err := SignKeyRecord(f.b, testRoom, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.dir.ApplyKeyRecord(testRoom, f.b.ID(), old); err != nil {
		t.Fatal(err)
	}
	_, err = f.call(t, f.b, invoke("light", "set_color", `{}`), now)
	wantCode(t, err, CodeUnauthorized)
	// B2's own replies are authenticated with the new link.
	if _, err := f.call(t, b2, Request{Room: testRoom, Capability: "light", Operation: Observe}, now); err != nil {
		t.Fatal(err)
	}
}

func TestACallerWithoutAKeyRecordIsUnauthorized(t *testing.T) {
	f := newFixture(t)
	d := mustKey(t)
	f.setRoster(t, 2, f.a.ID(), f.b.ID(), d.ID())
	now := time.Now()
	// D is a member; A has no key record of it and no bus to read one from.
	prep := f.prepare(t, d, invoke("light", "set_color", `{}`), now)
	data := f.p.serve(context.Background(), CallSubject(testRoom, f.a.ID()), prep.data, now)
	r, err := openReply(data, prep.call, prep.link)
	if err != nil || r.Code != CodeUnauthorized || r.Sig == nil {
		t.Fatalf("reply = %+v, %v; want unauthorized signed with A's host key", r, err)
	}

	// With a bus to read from, a member's record not yet delivered is fetched once, verified
	// and kept.
	rec, err := SignKeyRecord(d, testRoom, now)
	if err != nil {
		t.Fatal(err)
	}
	fetches := 0
	f.dir.setFetch(func(_ context.Context, room string, host HostID) ([]byte, error) {
		fetches++
		if room != testRoom || host != d.ID() {
			return nil, errors.New("no such record")
		}
		return rec, nil
	})
	for range 2 {
		if _, err := f.call(t, d, invoke("light", "set_color", `{}`), now); err != nil {
			t.Fatalf("after the fetch: %v", err)
		}
	}
	if fetches != 1 {
		t.Fatalf("%d fetches, want 1", fetches)
	}
	// A fetched record of another host than the caller is refused.
	e := mustKey(t)
	f.setRoster(t, 3, f.a.ID(), f.b.ID(), d.ID(), e.ID())
	f.dir.setFetch(func(context.Context, string, HostID) ([]byte, error) { return rec, nil })
	_, err = f.call(t, e, invoke("light", "set_color", `{}`), now)
	wantCode(t, err, CodeUnauthorized)

	// A removed member's key is no longer accepted, whatever the directory still holds.
	f.setRoster(t, 4, f.a.ID(), f.b.ID())
	_, err = f.call(t, d, invoke("light", "set_color", `{}`), now)
	wantCode(t, err, CodeUnauthorized)
	if _, ok := f.dir.memberKey(context.Background(), testRoom, d.ID(), true); ok {
		t.Fatal("a removed member's key is still found")
	}
}

func TestACallerNeedsTheProvidersKey(t *testing.T) {
	f := newFixture(t)
	d := mustKey(t)
	now := time.Now()
	caller := NewCaller(f.b, nil, f.peers)
	for name, req := range map[string]Request{
		"no member": {Room: testRoom, Provider: d.ID(), Capability: "light", Operation: Observe},
		"no room":   {Room: "r2", Provider: f.a.ID(), Capability: "light", Operation: Observe},
	} {
		if _, err := caller.Prepare(req, now); CodeOf(err) != CodeUnavailable {
			t.Errorf("%s: %v", name, err)
		}
	}
	f.setRoster(t, 2, f.a.ID(), f.b.ID(), d.ID())
	if _, err := caller.Prepare(Request{Room: testRoom, Provider: d.ID(), Capability: "light", Operation: Observe}, now); CodeOf(err) != CodeUnavailable {
		t.Errorf("a member without a key record: %v", err)
	}
	if _, err := caller.Prepare(Request{Room: testRoom, Provider: "nope", Capability: "light", Operation: Observe}, now); CodeOf(err) != CodeInvalidRequest {
		t.Errorf("a bad provider id: %v", err)
	}
}

func TestAnUnusableX25519KeyAuthenticatesNobody(t *testing.T) {
	f := newFixture(t)
	d := mustKey(t)
	f.setRoster(t, 2, f.a.ID(), f.b.ID(), d.ID())
	// D's record names the all-zero point, whose agreement with any key is refused.
	rec, err := signRecord(d, KindKey, KeyRecord{Room: testRoom, Host: d.ID(), X25519: base64.StdEncoding.EncodeToString(make([]byte, 32)), Time: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.dir.ApplyKeyRecord(testRoom, d.ID(), rec); err != nil {
		t.Fatal(err)
	}
	prep := f.prepare(t, d, invoke("light", "set_color", `{}`), time.Now())
	_, err = f.send(context.Background(), prep, time.Now())
	wantCode(t, err, CodeUnauthorized)
}

func TestKeyRecords(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	rec, err := SignKeyRecord(b, testRoom, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenKeyRecord(rec, b.ID())
	if pub, ok := got.publicKey(); err != nil || !ok || !bytes.Equal(pub.Bytes(), b.kxPub[:]) {
		t.Fatalf("OpenKeyRecord: %+v %v", got, err)
	}
	if _, err := OpenKeyRecord(rec, a.ID()); CodeOf(err) != CodeInvalidRecord {
		t.Fatalf("record of another host: %v", err)
	}
	if _, err := SignKeyRecord(b, "R.1", time.Now()); CodeOf(err) != CodeInvalidRecord {
		t.Fatalf("bad room: %v", err)
	}
	// A record A signs about B, and records with a bad key, are refused.
	for name, body := range map[string]KeyRecord{
		"short key":  {Room: testRoom, Host: b.ID(), X25519: base64.StdEncoding.EncodeToString(make([]byte, 31)), Time: 1},
		"not base64": {Room: testRoom, Host: b.ID(), X25519: "!!", Time: 1},
		"no time":    {Room: testRoom, Host: b.ID(), X25519: base64.StdEncoding.EncodeToString(b.kxPub[:]), Time: 0},
	} {
		data, err := signRecord(b, KindKey, body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := OpenKeyRecord(data, b.ID()); CodeOf(err) != CodeInvalidRecord {
			t.Errorf("%s: %v", name, err)
		}
	}
	forged, err := signRecord(a, KindKey, KeyRecord{Room: testRoom, Host: b.ID(), X25519: base64.StdEncoding.EncodeToString(a.kxPub[:]), Time: 9})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenKeyRecord(forged, b.ID()); CodeOf(err) != CodeInvalidRecord {
		t.Fatalf("B's record signed by A: %v", err)
	}

	d := NewDirectory()
	if err := d.ApplyKeyRecord(testRoom, b.ID(), rec); CodeOf(err) != CodeUnauthorized {
		t.Fatalf("record of an untrusted room: %v", err)
	}
	if err := d.Trust("r2", a.ID()); err != nil {
		t.Fatal(err)
	}
	if err := d.ApplyKeyRecord("r2", b.ID(), rec); CodeOf(err) != CodeInvalidRecord {
		t.Fatalf("record of another room: %v", err)
	}
}

func TestKeyRecordsPerRoomAreBoundedAndMembersKept(t *testing.T) {
	owner := mustKey(t)
	d := NewDirectory()
	if err := d.Trust(testRoom, owner.ID()); err != nil {
		t.Fatal(err)
	}
	members := []Member{{Host: owner.ID()}}
	keys := []*HostKey{owner}
	for range MaxMembers - 1 {
		k := mustKey(t)
		members = append(members, Member{Host: k.ID()})
		keys = append(keys, k)
	}
	roster, err := SignRoster(owner, Roster{Room: testRoom, Title: "t", Owner: owner.ID(), Version: 1, Members: members})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.ApplyRoster(testRoom, roster); err != nil {
		t.Fatal(err)
	}
	apply := func(k *HostKey) error {
		rec, err := SignKeyRecord(k, testRoom, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return d.ApplyKeyRecord(testRoom, k.ID(), rec)
	}
	for _, k := range keys {
		if err := apply(k); err != nil {
			t.Fatal(err)
		}
	}
	// Non-members flood the room's records: the count stays bounded and no member's key is
	// crowded out.
	for range 2 * maxKeysPerRoom {
		if err := apply(mustKey(t)); err != nil {
			t.Fatal(err)
		}
	}
	d.mu.RLock()
	n := len(d.rooms[testRoom].keys)
	d.mu.RUnlock()
	if n != maxKeysPerRoom {
		t.Fatalf("%d key records kept, bound %d", n, maxKeysPerRoom)
	}
	for _, k := range keys {
		if _, ok := d.memberKey(context.Background(), testRoom, k.ID(), false); !ok {
			t.Fatalf("member %s lost its key", k.ID())
		}
	}
}

func TestRepliesToVerifiedCallsCarryAMAC(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	for name, tc := range map[string]struct {
		req    Request
		forge  bool
		code   string
		macked bool
	}{
		"result":            {invoke("light", "set_color", `{}`), false, "", true},
		"refused after MAC": {invoke("light", "explode", `{}`), false, CodeUnauthorized, true},
		"forged":            {invoke("light", "set_color", `{}`), true, CodeUnauthorized, false},
	} {
		prep := f.prepare(t, f.b, tc.req, now)
		if tc.forge {
			prep.call.MAC[5] ^= 0x80
			prep.data, _ = EncodeCall(prep.call)
		}
		r, err := openReply(f.p.serve(context.Background(), CallSubject(testRoom, f.a.ID()), prep.data, now), prep.call, prep.link)
		if err != nil || r.Code != tc.code || (r.MAC != nil) != tc.macked || (r.Sig != nil) == tc.macked {
			t.Errorf("%s: %+v %v", name, r, err)
		}
	}
}

func TestAFetchOfAKeyRecordIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		d := mustKey(t)
		f.setRoster(t, 2, f.a.ID(), f.b.ID(), d.ID())
		// A bus that never answers: the fetch gives up within syncTimeout.
		f.dir.setFetch(func(ctx context.Context, _ string, _ HostID) ([]byte, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		start := time.Now()
		_, err := f.call(t, d, invoke("light", "set_color", `{}`), start)
		wantCode(t, err, CodeUnauthorized)
		if time.Since(start) != syncTimeout {
			t.Fatalf("the fetch gave up after %v, want %v", time.Since(start), syncTimeout)
		}
		// A reply with a MAC for a call prepared without a link is refused, not a panic.
		prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), time.Now())
		data := f.p.serve(context.Background(), CallSubject(testRoom, f.a.ID()), prep.data, time.Now())
		if _, err := openReply(data, prep.call, nil); CodeOf(err) != CodeInvalidReply {
			t.Fatalf("a MAC'd reply without a link: %v", err)
		}
	})
}
