package room

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// fuzzKey and fuzzProvider are fixed keys, so seeds stay valid MACs from one run to the next.
var (
	fuzzKey      = newHostKey(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	fuzzProvider = newHostKey(bytes.Repeat([]byte{9}, ed25519.SeedSize))
)

// mustLink is the link from caller to provider as caller derives it.
func mustLink(t testing.TB, caller, provider *HostKey) *linkKeys {
	t.Helper()
	l, err := caller.link(caller.ID(), provider.ID(), provider.kx.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCallRoundTripsAndVerifies(t *testing.T) {
	provider := mustKey(t)
	now := time.Now()
	c := &Call{Room: "r1", Provider: provider.ID(), Capability: "light", Operation: Invoke, Action: "set_color",
		Args: json.RawMessage(`{ "color" : "<#123456>" }`), RequestID: "a.b:c-1", Timeout: CallTimeout}
	data, err := sealCall(fuzzKey, mustLink(t, fuzzKey, provider), c, now)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeCall(data)
	if err != nil {
		t.Fatal(err)
	}
	// The provider derives the same link from its side.
	atProvider, err := provider.link(d.Caller, provider.ID(), fuzzKey.kx.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyCall(d, d.AuthBytes(), atProvider, now); err != nil {
		t.Fatal(err)
	}
	if string(d.Args) != `{"color":"<#123456>"}` || d.Caller != fuzzKey.ID() || !bytes.Equal(d.AuthBytes(), c.AuthBytes()) {
		t.Fatalf("decoded %+v", d)
	}
	// Any field changed breaks the MAC.
	for name, mutate := range map[string]func(*Call){
		"room":     func(c *Call) { c.Room = "r2" },
		"provider": func(c *Call) { c.Provider = fuzzKey.ID() },
		"caller":   func(c *Call) { c.Caller = provider.ID() },
		"cap":      func(c *Call) { c.Capability = "light2" },
		"op":       func(c *Call) { c.Operation = Observe },
		"action":   func(c *Call) { c.Action = "set_colour" },
		"args":     func(c *Call) { c.Args = json.RawMessage(`{"color":"#000000"}`) },
		"id":       func(c *Call) { c.RequestID = "other" },
		"time":     func(c *Call) { c.Time = c.Time.Add(time.Millisecond) },
		"timeout":  func(c *Call) { c.Timeout += time.Millisecond },
		"mac":      func(c *Call) { c.MAC = append([]byte{c.MAC[0] ^ 1}, c.MAC[1:]...) },
	} {
		m := *d
		mutate(&m)
		if err := verifyCall(&m, m.AuthBytes(), atProvider, now); CodeOf(err) != CodeUnauthorized {
			t.Errorf("%s changed: %v", name, err)
		}
	}
}

func TestDecodeCallRefusesMalformedCalls(t *testing.T) {
	provider := mustKey(t)
	c := &Call{Room: "r1", Provider: provider.ID(), Capability: "light", Operation: Observe, RequestID: "x", Timeout: CallTimeout}
	link := mustLink(t, fuzzKey, provider)
	good, err := sealCall(fuzzKey, link, c, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string) []byte { return []byte(strings.Replace(string(good), old, new, 1)) }
	for name, tc := range map[string]struct {
		data []byte
		code string
	}{
		"duplicate key":     {edit(`"room":"r1"`, `"room":"r1","room":"r1"`), CodeInvalidRequest},
		"case variant":      {edit(`"room"`, `"Room"`), CodeInvalidRequest},
		"unknown key":       {edit(`"v":2`, `"v":2,"extra":0`), CodeInvalidRequest},
		"version 1":         {edit(`"v":2`, `"v":1`), CodeInvalidRequest},
		"signature":         {edit(`"mac":"`, `"sig":"`), CodeInvalidRequest},
		"observe with args": {edit(`"argsDigest"`, `"args":{},"argsDigest"`), CodeInvalidRequest},
		"bad op":            {edit(`"observe"`, `"delete"`), CodeInvalidRequest},
		"bad room":          {edit(`"r1"`, `"R.1"`), CodeInvalidRequest},
		"digest":            {edit(`"argsDigest":"e3`, `"argsDigest":"f3`), CodeInvalidRequest},
		"timeout":           {edit(`"timeoutMs":10000`, `"timeoutMs":999999999`), CodeInvalidRequest},
		"short mac":         {edit(`"mac":"`, `"mac":"AA`), CodeInvalidRequest},
		"too large":         {append(good, bytes.Repeat([]byte(" "), MaxCallBytes)...), CodeTooLarge},
		"not json":          {[]byte("{"), CodeInvalidRequest},
	} {
		if _, err := DecodeCall(tc.data); CodeOf(err) != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
	big := &Call{Room: "r1", Provider: provider.ID(), Capability: "light", Operation: Invoke, Action: "a",
		Args: json.RawMessage(`{"x":"` + strings.Repeat("y", MaxArgsBytes) + `"}`), RequestID: "x", Timeout: CallTimeout}
	if _, err := sealCall(fuzzKey, link, big, time.Now()); CodeOf(err) != CodeTooLarge {
		t.Errorf("args over the bound: %v", err)
	}
	notObject := &Call{Room: "r1", Provider: provider.ID(), Capability: "light", Operation: Invoke, Action: "a",
		Args: json.RawMessage(`[1]`), RequestID: "x", Timeout: CallTimeout}
	if _, err := sealCall(fuzzKey, link, notObject, time.Now()); CodeOf(err) != CodeInvalidRequest {
		t.Errorf("array args: %v", err)
	}
}

// FuzzDecodeCall holds the decoder to its properties: whatever it accepts is within every
// bound and grammar, re-encodes to a call that decodes to the same authenticated bytes and
// MAC, and verifies under the link of fuzzKey to fuzzProvider only if its MAC is that link's
// call MAC over exactly those bytes — never its reply MAC.
func FuzzDecodeCall(f *testing.F) {
	at := time.UnixMilli(1_800_000_000_000)
	link := mustLink(f, fuzzKey, fuzzProvider)
	for _, c := range []*Call{
		{Room: "r1", Provider: fuzzProvider.ID(), Capability: "light", Operation: Observe, RequestID: "1", Timeout: CallTimeout},
		{Room: "living-room", Provider: fuzzProvider.ID(), Capability: "living_room_light", Operation: Invoke, Action: "set_led",
			Args: json.RawMessage(`{"color":"#123456","on":true,"n":1.5e3}`), RequestID: "a.b:c_d-9", Timeout: MaxCallTimeout},
	} {
		data, err := sealCall(fuzzKey, link, c, at)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCall(data)
		if err != nil {
			if CodeOf(err) != CodeInvalidRequest && CodeOf(err) != CodeTooLarge {
				t.Fatalf("unexpected code %v", err)
			}
			return
		}
		if len(data) > MaxCallBytes || len(c.Args) > MaxArgsBytes || !ValidRoomID(c.Room) || !c.Caller.Valid() ||
			!c.Provider.Valid() || !ValidRequestID(c.RequestID) || c.Timeout > MaxCallTimeout || c.Timeout <= 0 ||
			len(c.MAC) != 32 {
			t.Fatalf("accepted a call out of bounds: %+v", c)
		}
		again, err := EncodeCall(c)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		c2, err := DecodeCall(again)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !bytes.Equal(c.AuthBytes(), c2.AuthBytes()) || !bytes.Equal(c.MAC, c2.MAC) {
			t.Fatal("re-encoding changed the authenticated bytes")
		}
		auth := c.AuthBytes()
		valid := hmac.Equal(link.macCall(auth), c.MAC)
		if err := verifyCall(c, auth, link, c.Time); (err == nil) != valid {
			t.Fatalf("verifyCall = %v, MAC valid %v", err, valid)
		}
		if hmac.Equal(link.macReply(auth), c.MAC) && verifyCall(c, auth, link, c.Time) == nil {
			t.Fatal("a reply MAC verified as a call MAC")
		}
	})
}

func TestRecordsVerifyTheirSigner(t *testing.T) {
	owner, other := mustKey(t), mustKey(t)
	r := Roster{Room: "r1", Title: "t", Owner: owner.ID(), Version: 1, Members: []Member{{Host: owner.ID()}, {Host: other.ID(), Name: "B"}}}
	data, err := SignRoster(owner, r)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := OpenRoster(data, owner.ID()); err != nil || !got.Has(other.ID()) {
		t.Fatalf("OpenRoster: %+v %v", got, err)
	}
	if _, err := OpenRoster(data, other.ID()); CodeOf(err) != CodeInvalidRecord {
		t.Fatalf("roster checked against another owner: %v", err)
	}
	if _, err := SignRoster(other, r); CodeOf(err) != CodeInvalidRecord {
		t.Fatalf("a non-owner signed a roster: %v", err)
	}
	forged := bytes.Replace(data, []byte(`"version":1`), []byte(`"version":9`), 1)
	if _, err := OpenRoster(forged, owner.ID()); CodeOf(err) != CodeInvalidRecord {
		t.Fatalf("a changed roster opened: %v", err)
	}
	for _, bad := range []Roster{
		{Room: "r1", Title: "t", Owner: owner.ID(), Version: 1, Members: []Member{{Host: other.ID()}}},
		{Room: "r1", Title: "t", Owner: owner.ID(), Version: 0, Members: []Member{{Host: owner.ID()}}},
		{Room: "r1", Title: "t\n", Owner: owner.ID(), Version: 1, Members: []Member{{Host: owner.ID()}}},
		{Room: "r1", Title: "t", Owner: owner.ID(), Version: 1, Members: []Member{{Host: owner.ID()}, {Host: owner.ID()}}},
	} {
		if _, err := SignRoster(owner, bad); CodeOf(err) != CodeInvalidRecord {
			t.Errorf("SignRoster(%+v) = %v", bad, err)
		}
	}

	p, err := SignPresence(other, "r1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenPresence(p, other.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenPresence(p, owner.ID()); CodeOf(err) != CodeInvalidRecord {
		t.Fatalf("presence of another host: %v", err)
	}
	proj, err := SignProjection(owner, Projection{Room: "r1", Provider: owner.ID(), Version: 1,
		Publications: []Publication{{Room: "r1", Capability: "light", Actions: []string{"set_color"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := OpenProjection(proj, owner.ID()); err != nil || len(got.Publications) != 1 {
		t.Fatalf("OpenProjection: %+v %v", got, err)
	}
	if _, err := OpenProjection(proj, other.ID()); CodeOf(err) != CodeInvalidRecord {
		t.Fatalf("projection of another host: %v", err)
	}

	d := NewDirectory()
	if _, err := d.ApplyRoster("r1", data); CodeOf(err) != CodeUnauthorized {
		t.Fatalf("roster of an untrusted room: %v", err)
	}
	if err := d.Trust("r1", owner.ID()); err != nil {
		t.Fatal(err)
	}
	if err := d.Trust("r1", other.ID()); CodeOf(err) != CodeUnauthorized {
		t.Fatalf("a second owner: %v", err)
	}
	if _, err := d.ApplyRoster("r2", data); CodeOf(err) != CodeUnauthorized {
		t.Fatalf("roster applied to another room: %v", err)
	}
}
