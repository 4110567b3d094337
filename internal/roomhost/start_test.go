package roomhost

import (
	"encoding/json"
	"testing"

	"github.com/airlockhq/airlock/internal/room"
)

// TestStartInvokeAnswersLikeInvoke drives the owner socket's path for room calls: the same
// results and refusals as Invoke and Observe, each given to done once, and a call that would
// wait for the bus first left to the caller (false, done not called).
func TestStartInvokeAnswersLikeInvoke(t *testing.T) {
	a, b := twoHosts(t, 0)
	bg := ctx(t)
	if _, err := a.svc.Publish(bg, Publish{Room: "home", Capability: "lamp", Actions: []string{"set_color"}, Observe: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B sees A's lamp", func() bool {
		caps, _ := b.svc.Capabilities(bg, "home")
		return len(caps) == 1
	})
	// The first call may have to read A's key record from the bus; Invoke does.
	if _, err := b.svc.Invoke(bg, "home", string(a.svc.HostID()), "lamp", "set_color", json.RawMessage(`{"color":"#000000"}`)); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		raw json.RawMessage
		err error
	}
	run := func(start func(done func(json.RawMessage, error)) bool) answer {
		t.Helper()
		ch := make(chan answer, 2)
		if !start(func(raw json.RawMessage, err error) { ch <- answer{raw, err} }) {
			t.Fatal("the call did not start")
		}
		got := <-ch
		if len(ch) != 0 {
			t.Fatal("done was called twice")
		}
		return got
	}
	provider := string(a.svc.HostID())
	got := run(func(done func(json.RawMessage, error)) bool {
		return b.svc.StartInvoke(bg, "home", provider, "lamp", "set_color", json.RawMessage(`{"color":"#123456"}`), done)
	})
	if got.err != nil || string(got.raw) != `{"done":"set_color"}` {
		t.Fatalf("StartInvoke = %s, %v", got.raw, got.err)
	}
	got = run(func(done func(json.RawMessage, error)) bool {
		return b.svc.StartObserve(bg, "home", provider, "lamp", done)
	})
	if got.err != nil || string(got.raw) != `{"on":true}` {
		t.Fatalf("StartObserve = %s, %v", got.raw, got.err)
	}
	got = run(func(done func(json.RawMessage, error)) bool {
		return b.svc.StartInvoke(bg, "home", provider, "lamp", "reboot", nil, done)
	})
	codeIs(t, got.err, room.CodeUnauthorized)
	got = run(func(done func(json.RawMessage, error)) bool {
		return b.svc.StartInvoke(bg, "elsewhere", provider, "lamp", "set_color", nil, done)
	})
	codeIs(t, got.err, CodeUnknownRoom)
	got = run(func(done func(json.RawMessage, error)) bool {
		return b.svc.StartInvoke(bg, "home", "not-a-host", "lamp", "set_color", nil, done)
	})
	codeIs(t, got.err, room.CodeInvalidRequest)
	// A provider whose key record B has not read: left to Invoke.
	other := string(b.svc.HostID()[:63]) + "0"
	if other == string(b.svc.HostID()) {
		other = string(b.svc.HostID()[:63]) + "1"
	}
	if b.svc.StartInvoke(bg, "home", other, "lamp", "set_color", nil, func(json.RawMessage, error) { t.Error("done called") }) {
		t.Fatal("a call to a provider without a known key started")
	}
}
