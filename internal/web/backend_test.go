package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Host ids of the test room: this host (A) and the other member (B).
const (
	hostA = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
	hostB = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"
	// canary is a secret the test backend keeps in its internal state (a capability handle,
	// an endpoint, adapter stderr); no page, API answer or event may ever carry it.
	canary = "CANARY-handle-5e1f0c9d2b7a"
)

// lightSchema is set_color's input: a JSON Schema with a string enum.
const lightSchema = `{"type":"object","properties":{"color":{"type":"string","enum":["red","green","blue"],"title":"Colour"}},"required":["color"],"additionalProperties":false}`

// testBackend is a scripted Backend: room "kitchen" with this host and B, B's light
// (observe, set_color), this host's own printer (print, approve each, a schema the page shows
// raw), and one call from B waiting for approval.
type testBackend struct {
	mu        sync.Mutex
	color     string
	handle    string // internal state that must not leak
	subs      map[chan Event]struct{}
	approvals []Approval
	decided   map[string]bool
	memories  []Memory
	invokes   int
}

func newTestBackend() *testBackend {
	return &testBackend{
		color:  "off",
		handle: canary,
		subs:   make(map[chan Event]struct{}),
		approvals: []Approval{{
			ID: "ap-1", Room: "kitchen", Caller: hostB, Capability: "printer", Action: "print",
			Args: json.RawMessage(`{"text":"<b>hello</b>","memo":"pay 10\u202e00001\u202c EUR"}`), Expires: time.Now().Add(time.Minute),
		}},
		decided: make(map[string]bool),
	}
}

func (b *testBackend) Rooms(context.Context) ([]Room, error) {
	return []Room{{ID: "kitchen", Title: "Kitchen <b>bold</b>", Owner: hostA, Members: 2}}, nil
}

func (b *testBackend) Room(_ context.Context, id string) (RoomDetail, error) {
	if id != "kitchen" {
		return RoomDetail{}, &Error{Code: "unknown_room", Message: "no room with that id", Err: fmt.Errorf("lookup %s with %s", id, b.handle)}
	}
	return RoomDetail{
		Room:    Room{ID: "kitchen", Title: "Kitchen <b>bold</b>", Owner: hostA, Members: 2},
		Members: []Member{{HostID: hostA, Name: "alice", Self: true, Present: true}, {HostID: hostB, Name: "bob\u2067\u200b", Present: true}},
		Capabilities: []Capability{
			{Provider: hostB, CapabilityID: "living_room_light", Title: "Living room light", Observe: true, Available: true,
				Actions: []Action{{Name: "set_color", Title: "Set color\u202e", Input: json.RawMessage(lightSchema)}}},
			{Provider: hostA, ProviderSelf: true, CapabilityID: "printer", Title: "Printer", Observe: true, UnavailableReason: "adapter_not_ready",
				Actions: []Action{{Name: "print", Title: "Print", ApproveEach: true,
					Input: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","pattern":"^[a-z]+$"}}}`)}}},
		},
	}, nil
}

func (b *testBackend) Observe(_ context.Context, room, provider, capability string) (json.RawMessage, error) {
	if capability != "living_room_light" {
		// An uncoded failure quoting internal state: the page must show only "internal".
		return nil, fmt.Errorf("adapter stderr: connect %s refused", b.handle)
	}
	b.mu.Lock()
	color := b.color
	b.mu.Unlock()
	b.publish(Event{Kind: EventCall, Time: time.Now(), Room: room, Caller: hostA, Provider: provider, Capability: capability, Operation: "observe", Outcome: "ok", DurationMs: 1})
	return json.Marshal(map[string]any{"on": color != "off", "color": color})
}

func (b *testBackend) Invoke(_ context.Context, room, provider, capability, action string, args json.RawMessage) (json.RawMessage, error) {
	var a struct {
		Color string `json:"color"`
	}
	if err := json.Unmarshal(args, &a); err != nil || capability != "living_room_light" || action != "set_color" {
		return nil, &Error{Code: "invalid_args", Message: "set_color takes a color", Err: errors.New(b.handle)}
	}
	if a.Color == "blue" {
		b.publish(Event{Kind: EventCall, Time: time.Now(), Room: room, Caller: hostA, Provider: provider, Capability: capability, Operation: "invoke", Action: action, Outcome: "busy", DurationMs: 2})
		return nil, &Error{Code: "busy", Message: "the light is busy", Err: errors.New(b.handle)}
	}
	b.mu.Lock()
	b.color = a.Color
	b.invokes++
	b.mu.Unlock()
	b.publish(Event{Kind: EventCall, Time: time.Now(), Room: room, Caller: hostA, Provider: provider, Capability: capability, Operation: "invoke", Action: action, Outcome: "ok", DurationMs: 3})
	return json.Marshal(map[string]any{"on": true, "color": a.Color})
}

func (b *testBackend) Approvals(context.Context) ([]Approval, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Approval(nil), b.approvals...), nil
}

func (b *testBackend) Decide(_ context.Context, id string, approve bool) error {
	b.mu.Lock()
	var found *Approval
	for i, a := range b.approvals {
		if a.ID == id {
			found = &a
			b.approvals = append(b.approvals[:i], b.approvals[i+1:]...)
			break
		}
	}
	if found == nil {
		b.mu.Unlock()
		return &Error{Code: "unknown_approval", Message: "no call waits for that approval"}
	}
	b.decided[id] = approve
	b.mu.Unlock()
	outcome := "denied"
	if approve {
		outcome = "approved"
	}
	b.publish(Event{Kind: EventApproval, Time: time.Now(), Room: found.Room, Caller: found.Caller, Provider: hostA, Capability: found.Capability, Operation: "invoke", Action: found.Action, Outcome: outcome})
	return nil
}

func (b *testBackend) ApproveRemember(ctx context.Context, id string, r Remember) error {
	if r.Pattern == "[" {
		return &Error{Code: "not_rememberable", Message: "the pattern is not a valid path glob"}
	}
	if err := b.Decide(ctx, id, true); err != nil {
		return err
	}
	b.mu.Lock()
	match := "these arguments"
	if r.AnyArgs {
		match = "any arguments"
	}
	if r.Pattern != "" {
		match = r.Pattern
	}
	b.memories = append(b.memories, Memory{ID: "mem-" + id, Scope: "room kitchen host " + hostB, Target: "printer.print", Match: match, Since: time.Now()})
	b.mu.Unlock()
	return nil
}

func (b *testBackend) Remembered(context.Context) ([]Memory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Memory(nil), b.memories...), nil
}

func (b *testBackend) Forget(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, m := range b.memories {
		if m.ID == id {
			b.memories = append(b.memories[:i], b.memories[i+1:]...)
			return nil
		}
	}
	return &Error{Code: "unknown_approval", Message: "no remembered decision has that id"}
}

func (b *testBackend) decision(id string) (approve, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	approve, ok = b.decided[id]
	return approve, ok
}

// testSubscriptionBuffer bounds a subscriber's channel; a full one drops its oldest event.
const testSubscriptionBuffer = 16

func (b *testBackend) Subscribe(ctx context.Context) (<-chan Event, error) {
	ch := make(chan Event, testSubscriptionBuffer)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	context.AfterFunc(ctx, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		close(ch)
		b.mu.Unlock()
	})
	return ch, nil
}

func (b *testBackend) subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

func (b *testBackend) publish(ev Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		for {
			select {
			case ch <- ev:
			default:
				select {
				case <-ch:
				default:
				}
				continue
			}
			break
		}
	}
}
