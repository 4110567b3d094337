package roomhost

import (
	"context"
	"encoding/json"
	"testing"
)

// backend is the web layer's Backend (ROOMS-PLAN "Web backend") with this package's types:
// the service must keep these method names and shapes for the lead's glue.
type backend interface {
	Rooms(ctx context.Context) ([]Room, error)
	Room(ctx context.Context, id string) (RoomDetail, error)
	Observe(ctx context.Context, room, provider, capability string) (json.RawMessage, error)
	Invoke(ctx context.Context, room, provider, capability, action string, args json.RawMessage) (json.RawMessage, error)
	Approvals(ctx context.Context) ([]Approval, error)
	Decide(ctx context.Context, approvalID string, approve bool) error
	Subscribe(ctx context.Context) (<-chan Event, error)
}

var _ backend = (*Service)(nil)

func TestCallLogBoundsAndSubscribers(t *testing.T) {
	l := newCallLog(4)
	for i := range 6 {
		l.add(Event{Kind: EventCall, DurationMs: int64(i)})
	}
	got := l.snapshot()
	if len(got) != 4 || got[0].DurationMs != 2 || got[3].DurationMs != 5 {
		t.Fatalf("snapshot %+v, want the last 4 in order", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	slow, err := l.subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A reader that reads nothing keeps the newest SubscriberBuffer events.
	for i := range SubscriberBuffer + 10 {
		l.add(Event{DurationMs: int64(i)})
	}
	if first := <-slow; first.DurationMs != 10 {
		t.Fatalf("oldest kept event %d, want 10", first.DurationMs)
	}
	if n := len(slow); n != SubscriberBuffer-1 {
		t.Fatalf("%d events queued, want %d", n, SubscriberBuffer-1)
	}
	// Past MaxSubscribers a subscription is refused busy.
	var subs []context.CancelFunc
	for range MaxSubscribers - 1 {
		c, cc := context.WithCancel(context.Background())
		subs = append(subs, cc)
		if _, err := l.subscribe(c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.subscribe(context.Background()); codeOf(err) != "busy" {
		t.Fatalf("subscriber %d: %v, want busy", MaxSubscribers+1, err)
	}
	// Ending the context closes the channel, after what was queued.
	cancel()
	n := 0
	for range slow {
		n++
	}
	if n != SubscriberBuffer-1 {
		t.Fatalf("read %d queued events before the close, want %d", n, SubscriberBuffer-1)
	}
	for _, cc := range subs {
		cc()
	}
	l.closeAll()
	if _, err := l.subscribe(context.Background()); codeOf(err) != "unavailable" {
		t.Fatalf("subscribe after close: %v", err)
	}
}
