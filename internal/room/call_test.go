package room

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/ndjson"
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

// cloneMsg copies m's header so that a test can edit it.
func cloneMsg(m busport.Msg) busport.Msg {
	h := make(map[string][]string, len(m.Header))
	for k, vs := range m.Header {
		h[k] = slices.Clone(vs)
	}
	return busport.Msg{Header: h, Data: bytes.Clone(m.Data)}
}

func TestDecodeCallRefusesMalformedCalls(t *testing.T) {
	provider := mustKey(t)
	link := mustLink(t, fuzzKey, provider)
	good, err := sealCall(fuzzKey, link, &Call{Room: "r1", Provider: provider.ID(), Capability: "light", Operation: Observe, RequestID: "x", Timeout: CallTimeout}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	invoke, err := sealCall(fuzzKey, link, &Call{Room: "r1", Provider: provider.ID(), Capability: "light", Operation: Invoke, Action: "set",
		Args: json.RawMessage(`{"on":true}`), RequestID: "y", Timeout: CallTimeout}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeCall(good); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeCall(invoke); err != nil {
		t.Fatal(err)
	}
	edit := func(m busport.Msg, f func(h map[string][]string, m *busport.Msg)) busport.Msg {
		m = cloneMsg(m)
		f(m.Header, &m)
		return m
	}
	set := func(m busport.Msg, name string, vs ...string) busport.Msg {
		return edit(m, func(h map[string][]string, _ *busport.Msg) {
			if vs == nil {
				delete(h, name)
			} else {
				h[name] = vs
			}
		})
	}
	rename := func(m busport.Msg, from, to string) busport.Msg {
		return edit(m, func(h map[string][]string, _ *busport.Msg) { h[to] = h[from]; delete(h, from) })
	}
	data := func(m busport.Msg, d string) busport.Msg {
		return edit(m, func(_ map[string][]string, m *busport.Msg) { m.Data = []byte(d) })
	}
	for name, tc := range map[string]struct {
		m    busport.Msg
		code string
	}{
		"repeated field": {set(good, hdrRoom, "r1", "r1"), CodeInvalidRequest},
		"empty field":    {set(good, hdrRoom, ""), CodeInvalidRequest},
		"missing field":  {set(good, hdrRequestID), CodeInvalidRequest},
		"case variant":   {rename(good, hdrRoom, "Room"), CodeInvalidRequest},
		"unknown field":  {set(good, "extra", "0"), CodeInvalidRequest},
		"version 2":      {set(good, hdrVersion, "2"), CodeInvalidRequest},
		"no version":     {set(good, hdrVersion), CodeInvalidRequest},
		"signature":      {rename(good, hdrMAC, hdrSig), CodeInvalidRequest},
		"MAC with a line break": {edit(good, func(h map[string][]string, _ *busport.Msg) {
			h[hdrMAC] = []string{h[hdrMAC][0][:8] + "\r\n" + h[hdrMAC][0][8:]}
		}), CodeInvalidRequest},
		"no header":           {busport.Msg{Data: []byte(`{}`)}, CodeInvalidRequest},
		"observe with args":   {data(good, `{}`), CodeInvalidRequest},
		"observe with action": {set(good, hdrAction, "set"), CodeInvalidRequest},
		"invoke without args": {data(invoke, ""), CodeInvalidRequest},
		"args not an object":  {data(invoke, `[1]`), CodeInvalidRequest},
		"args not json":       {data(invoke, `{"on":`), CodeInvalidRequest},
		"args duplicate key":  {data(invoke, `{"on":true,"on":false}`), CodeInvalidRequest},
		"args too large":      {data(invoke, `{"x":"`+strings.Repeat("y", MaxArgsBytes)+`"}`), CodeTooLarge},
		"bad op":              {set(good, hdrOperation, "delete"), CodeInvalidRequest},
		"bad room":            {set(good, hdrRoom, "R.1"), CodeInvalidRequest},
		"bad caller":          {set(good, hdrCaller, strings.ToUpper(string(fuzzKey.ID()))), CodeInvalidRequest},
		"timeout":             {set(good, hdrTimeout, "999999999"), CodeInvalidRequest},
		"zero timeout":        {set(good, hdrTimeout, "0"), CodeInvalidRequest},
		"signed timeout":      {set(good, hdrTimeout, "+10000"), CodeInvalidRequest},
		"leading zero":        {set(good, hdrTimeout, "010000"), CodeInvalidRequest},
		"time not a number":   {set(good, hdrTime, "1e12"), CodeInvalidRequest},
		"negative time":       {set(good, hdrTime, "-1"), CodeInvalidRequest},
		"short mac":           {set(good, hdrMAC, "AA"+field(good.Header, hdrMAC)), CodeInvalidRequest},
		"too large":           {set(good, hdrRequestID, strings.Repeat("x", MaxCallBytes)), CodeTooLarge},
	} {
		if _, err := DecodeCall(tc.m); CodeOf(err) != tc.code {
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

// headerText and parseHeader are the fuzz target's text form of a header: "name:value" lines,
// a name repeated for each of its values, as the bus carries them.
func headerText(h map[string][]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			b.WriteString(k + ":" + v + "\n")
		}
	}
	return b.String()
}

func parseHeader(s string) map[string][]string {
	h := map[string][]string{}
	for line := range strings.SplitSeq(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			h[k] = append(h[k], v)
		}
	}
	return h
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
		m, err := sealCall(fuzzKey, link, c, at)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(headerText(m.Header), m.Data)
	}
	f.Fuzz(func(t *testing.T, hdr string, data []byte) {
		m := busport.Msg{Header: parseHeader(hdr), Data: data}
		c, err := DecodeCall(m)
		if err != nil {
			if CodeOf(err) != CodeInvalidRequest && CodeOf(err) != CodeTooLarge {
				t.Fatalf("unexpected code %v", err)
			}
			return
		}
		if headerBytes(m.Header)+len(data) > MaxCallBytes || len(c.Args) > MaxArgsBytes || !ValidRoomID(c.Room) || !c.Caller.Valid() ||
			!c.Provider.Valid() || !ValidRequestID(c.RequestID) || c.Timeout > MaxCallTimeout || c.Timeout <= 0 ||
			len(c.MAC) != 32 || (c.Args != nil && ndjson.Valid(c.Args) != nil) {
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
	// The same signature spelled with a line break (a JSON escape) is another record's text.
	i := bytes.Index(data, []byte(`"sig":"`)) + len(`"sig":"`) + 8
	respelled := append(append(bytes.Clone(data[:i]), `\r\n`...), data[i:]...)
	if _, err := OpenRoster(respelled, owner.ID()); CodeOf(err) != CodeInvalidRecord {
		t.Fatalf("a roster whose signature has a line break opened: %v", err)
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

func TestOpenReplyRefusesMalformedReplies(t *testing.T) {
	provider := mustKey(t)
	link := mustLink(t, fuzzKey, provider)
	c := &Call{Room: "r1", Provider: provider.ID(), Capability: "light", Operation: Observe, RequestID: "x", Timeout: CallTimeout}
	if _, err := sealCall(fuzzKey, link, c, time.Now()); err != nil {
		t.Fatal(err)
	}
	atProvider, err := provider.link(fuzzKey.ID(), provider.ID(), fuzzKey.kx.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	// reply seals r as the provider, after edit changes it.
	reply := func(r Reply, edit func(m *busport.Msg)) busport.Msg {
		r.Room, r.Caller, r.RequestID = c.Room, c.Caller, c.RequestID
		m := cloneMsg(sealReply(provider, atProvider, &r))
		if edit != nil {
			edit(&m)
		}
		return m
	}
	ok := Reply{Result: json.RawMessage(`{"on":true}`)}
	if r, err := openReply(reply(ok, nil), c, link); err != nil || string(r.Result) != `{"on":true}` {
		t.Fatalf("good reply: %+v %v", r, err)
	}
	if r, err := openReply(reply(Reply{Code: CodeBusy}, nil), c, link); err != nil || r.Code != CodeBusy {
		t.Fatalf("good refusal: %+v %v", r, err)
	}
	for name, m := range map[string]busport.Msg{
		"repeated field":   reply(ok, func(m *busport.Msg) { m.Header[hdrRoom] = []string{"r1", "r1"} }),
		"empty field":      reply(ok, func(m *busport.Msg) { m.Header[hdrCode] = []string{""} }),
		"case variant":     reply(ok, func(m *busport.Msg) { m.Header["Room"] = m.Header[hdrRoom]; delete(m.Header, hdrRoom) }),
		"unknown field":    reply(ok, func(m *busport.Msg) { m.Header["ok"] = []string{"true"} }),
		"version 2":        reply(ok, func(m *busport.Msg) { m.Header[hdrVersion] = []string{"2"} }),
		"no result":        reply(ok, func(m *busport.Msg) { m.Data = nil }),
		"result not json":  reply(ok, func(m *busport.Msg) { m.Data = []byte(`{"on":`) }),
		"result duplicate": reply(Reply{Result: json.RawMessage(`{"on":true,"on":false}`)}, nil),
		"code and result":  reply(Reply{Code: CodeBusy}, func(m *busport.Msg) { m.Data = []byte(`{}`) }),
		"bad code":         reply(Reply{Code: "Busy!"}, nil),
		"both mac and sig": reply(ok, func(m *busport.Msg) { m.Header[hdrSig] = m.Header[hdrMAC] }),
		"mac with a line break": reply(ok, func(m *busport.Msg) {
			m.Header[hdrMAC] = []string{m.Header[hdrMAC][0][:8] + "\n" + m.Header[hdrMAC][0][8:]}
		}),
		"signature with a line break": func() busport.Msg {
			r := ok
			r.Room, r.Caller, r.RequestID = c.Room, c.Caller, c.RequestID
			m := cloneMsg(sealReply(provider, nil, &r))
			if _, err := openReply(m, c, link); err != nil {
				t.Fatalf("signed reply: %v", err)
			}
			m.Header[hdrSig] = []string{m.Header[hdrSig][0][:8] + "\r\n" + m.Header[hdrSig][0][8:]}
			return m
		}(),
		"another request": reply(ok, func(m *busport.Msg) { m.Header[hdrRequestID] = []string{"y"} }),
		"tampered result": reply(ok, func(m *busport.Msg) { m.Data = []byte(`{"on":false}`) }),
		"too large":       reply(Reply{Result: json.RawMessage(`"` + strings.Repeat("x", MaxReplyBytes) + `"`)}, nil),
		"no header":       {Data: []byte(`{}`)},
	} {
		if _, err := openReply(m, c, link); CodeOf(err) != CodeInvalidReply {
			t.Errorf("%s: %v, want %s", name, err, CodeInvalidReply)
		}
	}
}

// FuzzOpenReply holds the reply decoder to its properties: whatever it accepts answers the
// call it was opened for, has exactly one outcome (a valid code and no result, or a result
// that is one JSON value without duplicate keys), is within the bound, and is authenticated:
// resealed by the provider with the same link (or its host key), it carries the same MAC (or
// a signature that verifies).
func FuzzOpenReply(f *testing.F) {
	link := mustLink(f, fuzzKey, fuzzProvider)
	atProvider, err := fuzzProvider.link(fuzzKey.ID(), fuzzProvider.ID(), fuzzKey.kx.PublicKey())
	if err != nil {
		f.Fatal(err)
	}
	c := &Call{Room: "r1", Provider: fuzzProvider.ID(), Caller: fuzzKey.ID(), Capability: "light", Operation: Observe, RequestID: "1", Timeout: CallTimeout}
	for _, r := range []*Reply{
		{Result: json.RawMessage(`{"on":true,"brightness":42}`)},
		{Code: CodeBusy},
	} {
		r.Room, r.Caller, r.RequestID = c.Room, c.Caller, c.RequestID
		m := sealReply(fuzzProvider, atProvider, r)
		f.Add(headerText(m.Header), m.Data)
		s := sealReply(fuzzProvider, nil, r)
		f.Add(headerText(s.Header), s.Data)
	}
	f.Fuzz(func(t *testing.T, hdr string, data []byte) {
		m := busport.Msg{Header: parseHeader(hdr), Data: data}
		r, err := openReply(m, c, link)
		if err != nil {
			if CodeOf(err) != CodeInvalidReply && CodeOf(err) != CodeTooLarge {
				t.Fatalf("unexpected code %v", err)
			}
			return
		}
		if r.Room != c.Room || r.Provider != c.Provider || r.Caller != c.Caller || r.RequestID != c.RequestID ||
			len(r.Result) > MaxResultBytes || (r.Code != "") == (r.Result != nil) || (r.Code != "" && !validCode(r.Code)) ||
			(r.Result != nil && ndjson.Valid(r.Result) != nil) {
			t.Fatalf("accepted a reply out of bounds: %+v", r)
		}
		again := &Reply{Room: r.Room, Provider: r.Provider, Caller: r.Caller, RequestID: r.RequestID, Code: r.Code, Result: r.Result}
		switch {
		case r.MAC != nil:
			sealReply(fuzzProvider, atProvider, again)
			if !hmac.Equal(again.MAC, r.MAC) {
				t.Fatal("accepted a reply whose MAC the provider would not make")
			}
		case !ed25519.Verify(fuzzProvider.ID().PublicKey(), again.authBytes(), r.Sig):
			t.Fatal("accepted a reply whose signature does not verify")
		}
	})
}
