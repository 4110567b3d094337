package mcp

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/protocol"
)

// TestKeyTable pins what a retry is: an identical call after an indefinite outcome reuses the
// key until keyTTL; after a definite one, or from another MCP session, it gets a new key;
// calls in flight together share one; an explicit key is the same in every process.
func TestKeyTable(t *testing.T) {
	kt := newKeyTable()
	now := time.Unix(1000, 0)
	kt.now = func() time.Time { return now }
	fp := callFingerprint("s1", "fs_write", json.RawMessage(`{"b":1,"a":"x"}`), "")
	if fp != callFingerprint("s1", "fs_write", json.RawMessage(`{"a":"x","b":1}`), "") {
		t.Fatal("member order changed the fingerprint")
	}
	if fp == callFingerprint("s2", "fs_write", json.RawMessage(`{"a":"x","b":1}`), "") {
		t.Fatal("another MCP session has the same fingerprint")
	}
	if callFingerprint("s1", "fs_write", json.RawMessage(`{"b":1.0,"a":"x"}`), "") == fp {
		t.Fatal("1.0 and 1 are different arguments to the adapter, but one fingerprint")
	}

	a := kt.acquire(fp)
	b := kt.acquire(fp)
	if a != b {
		t.Fatal("calls in flight together got different keys")
	}
	kt.release(fp, a, false) // cancelled
	kt.release(fp, b, false)
	c := kt.acquire(fp)
	if c.key != a.key {
		t.Fatal("a retry after a cancelled call got a new key")
	}
	kt.release(fp, c, true)
	d := kt.acquire(fp)
	if d.key == a.key {
		t.Fatal("a call after a definite outcome reused the key")
	}
	kt.release(fp, d, false)
	now = now.Add(keyTTL)
	if e := kt.acquire(fp); e.key == d.key {
		t.Fatal("an expired open key was reused")
	}

	x := callFingerprint("s1", "fs_write", json.RawMessage(`{}`), "k-1")
	if x != callFingerprint("s9", "fs_write", json.RawMessage(`{"other":1}`), "k-1") {
		t.Fatal("an explicit key depends on the session or the arguments")
	}
	if newKeyTable().acquire(x).key != kt.acquire(x).key {
		t.Fatal("an explicit key differs between processes")
	}
}

// TestKeyTableHoldsNoArguments pins that a key holds a digest of its call's arguments, not
// the arguments: the table keeps up to maxKeys entries for keyTTL, and a call's arguments may
// be up to MaxMessageBytes, so a client sending a distinct call each time with large
// arguments pinned gigabytes for an hour, in the unnamed fingerprint and in an action's
// arguments kept for the conflict check.
func TestKeyTableHoldsNoArguments(t *testing.T) {
	big := json.RawMessage(`{"content":"` + strings.Repeat("x", 1<<20) + `"}`)
	fp := callFingerprint("s1", "fs_write", big, "")
	if len(fp) > 64 {
		t.Fatalf("a fingerprint of %d bytes of arguments is %d bytes", len(big), len(fp))
	}
	if fp == callFingerprint("s1", "fs_write", json.RawMessage(`{"content":"x"}`), "") {
		t.Fatal("other arguments, one fingerprint")
	}
	e := reflect.TypeFor[keyEntry]()
	for i := range e.NumField() {
		if k := e.Field(i).Type.Kind(); (k == reflect.String && e.Field(i).Name != "key") || k == reflect.Slice {
			t.Errorf("keyEntry.%s is a %s: what does it hold?", e.Field(i).Name, k)
		}
	}
}

func TestKeyTableBound(t *testing.T) {
	kt := newKeyTable()
	for i := range maxKeys + 10 {
		fp := callFingerprint("", "t", json.RawMessage(`{"i":`+json.Number(itoa(i)).String()+`}`), "")
		kt.release(fp, kt.acquire(fp), false)
	}
	if n := len(kt.byFP); n > maxKeys {
		t.Fatalf("%d keys held, bound %d", n, maxKeys)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestCapabilityBases(t *testing.T) {
	got := capabilityBases([]string{"desk_lamp", "a.b", "a_b", "x:y", "fs", "room", "room_lamp", "roomy"})
	if got["desk_lamp"] != "desk_lamp" || got["x:y"] != "x_y" || got["roomy"] != "roomy" {
		t.Fatalf("plain ids: %v", got)
	}
	if got["a.b"] == got["a_b"] || len(got["a.b"]) != len("a_b_")+8 || len(got["fs"]) != len("fs_")+8 {
		t.Fatalf("colliding ids: %v", got)
	}
	// room_lamp_set_power would be the room tool of a published "lamp".
	if len(got["room"]) != len("room_")+8 || len(got["room_lamp"]) != len("room_lamp_")+8 {
		t.Fatalf("ids that meet the room tools' names: %v", got)
	}
	// fs_read_many would be capability fs.read's action many.
	got = capabilityBases([]string{"fs.read", "fs_x", "fsx"})
	if len(got["fs.read"]) != len("fs_read_")+8 || len(got["fs_x"]) != len("fs_x_")+8 || got["fsx"] != "fsx" {
		t.Fatalf("ids that meet the fs and composed tools' names: %v", got)
	}
}

func TestObjectArguments(t *testing.T) {
	for _, c := range []struct {
		in, out string
		ok      bool
	}{
		{"", "{}", true}, {"null", "{}", true}, {` { "a" : 1 } `, `{"a":1}`, true},
		{"[]", "", false}, {`"s"`, "", false}, {`{"a":1,"a":2}`, "", false}, {`{"a":`, "", false}, {"1", "", false},
	} {
		got, err := objectArguments(json.RawMessage(c.in))
		if (err == nil) != c.ok || (c.ok && string(got) != c.out) {
			t.Errorf("objectArguments(%q) = %s, %v", c.in, got, err)
		}
	}
}

// FuzzArguments holds the arguments parser and the fingerprint's canonical form to their
// properties: accepted arguments are one compact JSON object; the canonical form is valid
// JSON, idempotent, and the same for any member order.
func FuzzArguments(f *testing.F) {
	for _, s := range []string{`{}`, `{"path":"a","content":"x"}`, `{"b":[1,2,{"c":null}],"a":1e3}`, `[]`, `{"a":1,"a":1}`, "{\"\\u00e9\":\"\\ud800\"}", ` null `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		args, err := objectArguments(in)
		if err != nil {
			return
		}
		if !json.Valid(args) || args[0] != '{' {
			t.Fatalf("accepted %q as %q", in, args)
		}
		c := canonicalJSON(args)
		if !json.Valid(c) {
			t.Fatalf("canonical form of %q is not JSON: %q", args, c)
		}
		if string(canonicalJSON(c)) != string(c) {
			t.Fatalf("canonical form not idempotent: %q", c)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(args, &m) == nil {
			re, _ := json.Marshal(m) // members sorted
			if string(canonicalJSON(re)) != string(c) {
				t.Fatalf("member order changed the canonical form: %q vs %q", canonicalJSON(re), c)
			}
		}
	})
}

// TestActionKeys pins the key table as the memory of capability actions: a client-named
// action's outcome is kept for keyTTL after it and answers the same call without a new run,
// the same name with other arguments is a conflict, a retryable failure is forgotten at once,
// and an unnamed action's definite outcome retires its key.
func TestActionKeys(t *testing.T) {
	kt := newKeyTable()
	now := time.Unix(1000, 0)
	kt.now = func() time.Time { return now }
	ok := &sdk.CallToolResult{}
	retryable := errorResult(&protocol.Error{Code: "unavailable", Message: "m", Retryable: true})
	refused := errorResult(&protocol.Error{Code: "invalid_args", Message: "m"})
	run := func(fp, args string, res *sdk.CallToolResult) *keyEntry {
		t.Helper()
		e, conflict := kt.acquireAction(fp, []byte(args))
		if conflict {
			t.Fatalf("%q %s: conflict", fp, args)
		}
		if kt.startRun(e) {
			kt.finishRun(fp, e, res)
		}
		<-e.done
		kt.release(fp, e, true)
		return e
	}

	named := callFingerprint("s1", "lamp_set", nil, "k")
	a := run(named, `{"level":10}`, ok)
	now = now.Add(keyTTL - time.Nanosecond)
	if b := run(named, `{"level":10}`, refused); b != a || b.res != ok {
		t.Fatal("a named action's outcome was not kept for keyTTL")
	}
	if _, conflict := kt.acquireAction(named, []byte(`{"level":20}`)); !conflict {
		t.Fatal("a named key with other arguments is no conflict")
	}
	now = now.Add(time.Nanosecond)
	if c := run(named, `{"level":20}`, ok); c == a {
		t.Fatal("a named action's outcome outlived keyTTL")
	}

	other := callFingerprint("s1", "lamp_set", nil, "k2")
	if d := run(other, `{}`, retryable); d.res != retryable || run(other, `{}`, ok).res != ok {
		t.Fatal("a retryable failure of a named action was kept")
	}
	if e := run(other, `{}`, refused); e.res != ok {
		t.Fatal("a named action's result was not kept")
	}

	unnamed := callFingerprint("s1", "lamp_set", json.RawMessage(`{}`), "")
	if f := run(unnamed, `{}`, ok); run(unnamed, `{}`, refused) == f {
		t.Fatal("an unnamed action's definite outcome did not retire its key")
	}

	// An unnamed action whose client gave up keeps its outcome for the retry, but not a
	// retryable failure: the retry was handed that stale failure instead of running again.
	for _, c := range []struct {
		name  string
		res   *sdk.CallToolResult
		rerun bool
	}{{"result", ok, false}, {"refused", refused, false}, {"retryable", retryable, true}} {
		e, _ := kt.acquireAction(unnamed, []byte(`{}`))
		kt.startRun(e)
		kt.release(unnamed, e, false) // cancelled
		kt.finishRun(unnamed, e, c.res)
		if got := run(unnamed, `{}`, ok); (got != e) != c.rerun {
			t.Errorf("%s: the retry after a cancelled call ran again: %v, want %v", c.name, got != e, c.rerun)
		}
	}
}

// TestKeyTableResultBound pins maxResultBytes: maxKeys counts entries, and a client sending a
// distinct key per call with large results pinned up to gigabytes for keyTTL. The outcomes the
// table holds for a retry now stay within the bound: past it, the one finished first is
// forgotten (its retry runs again), an outcome larger than the bound is not held, and an
// outcome a call is using is never dropped.
func TestKeyTableResultBound(t *testing.T) {
	kt := newKeyTable()
	now := time.Unix(1000, 0)
	kt.now = func() time.Time { return now }
	result := func(n int) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", n)}}}
	}
	kt.maxHeld = 3 * resultBytes(result(100))
	// run calls the action of fp, answering it res if it runs, and reports whether it ran.
	// It checks the bound after each call.
	run := func(fp string, res *sdk.CallToolResult) (ran bool) {
		t.Helper()
		e, conflict := kt.acquireAction(fp, []byte(`{}`))
		if conflict {
			t.Fatalf("%q: conflict", fp)
		}
		if ran = kt.startRun(e); ran {
			if res == nil { // the caller expects no run
				res = result(0)
			}
			kt.finishRun(fp, e, res)
		}
		<-e.done
		kt.release(fp, e, true)
		if kt.heldBytes > kt.maxHeld {
			t.Fatalf("%d bytes held, bound %d", kt.heldBytes, kt.maxHeld)
		}
		return ran
	}
	named := func(k string) string { return callFingerprint("s1", "lamp_set", nil, k) }

	for _, k := range []string{"k1", "k2", "k3"} {
		run(named(k), result(100))
	}
	if run(named("k1"), result(100)) || run(named("k2"), result(100)) {
		t.Fatal("an outcome within the bound was not remembered")
	}
	now = now.Add(time.Second)
	run(named("k4"), result(100)) // k1 finished first, though retried since
	if run(named("k4"), nil) || run(named("k3"), nil) || run(named("k2"), nil) {
		t.Fatal("an outcome finished after the forgotten one was forgotten")
	}
	if !run(named("k1"), result(100)) {
		t.Fatal("past the bound, the outcome finished first was remembered")
	}

	// An unnamed action whose client gave up holds its outcome for the retry, within the bound.
	unnamed := callFingerprint("s1", "lamp_set", json.RawMessage(`{}`), "")
	e, _ := kt.acquireAction(unnamed, []byte(`{}`))
	kt.startRun(e)
	kt.release(unnamed, e, false)
	kt.finishRun(unnamed, e, result(100))
	if kt.heldBytes > kt.maxHeld || !e.held {
		t.Fatalf("%d bytes held, bound %d; the cancelled call's outcome held: %v", kt.heldBytes, kt.maxHeld, e.held)
	}

	first := run(named("big"), result(1000))
	second := run(named("big"), result(1000)) // the same key again: it runs again, nothing held
	if !first || !second {
		t.Fatal("an outcome larger than the bound was held")
	}
	if run(unnamed, nil) || run(named("k1"), nil) {
		t.Fatal("an outcome larger than the bound made room for itself")
	}

	// An outcome in use counts only once no call uses it.
	in := named("in-use")
	e, _ = kt.acquireAction(in, []byte(`{}`))
	kt.startRun(e)
	kt.finishRun(in, e, result(1000))
	for _, k := range []string{"k5", "k6", "k7"} {
		run(named(k), result(100))
	}
	if kt.byFP[in] != e {
		t.Fatal("an outcome in use was dropped")
	}
	kt.release(in, e, true)
	if kt.byFP[in] != nil || kt.heldBytes > kt.maxHeld {
		t.Fatalf("%d bytes held, bound %d", kt.heldBytes, kt.maxHeld)
	}
}
