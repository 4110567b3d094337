package room

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/busport"
)

// subjectsConn is a busport.Conn that records the subjects served and their subscriptions'
// stops; the bus itself is package bus's to test.
type subjectsConn struct {
	busport.Conn
	mu      sync.Mutex
	served  []string
	stopped []string
}

type recordedSub struct {
	c       *subjectsConn
	subject string
}

func (s recordedSub) Stop() error {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.stopped = append(s.c.stopped, s.subject)
	return nil
}

func (c *subjectsConn) ServeMsg(subject string, _ int, _ busport.MsgHandler) (busport.Subscription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.served = append(c.served, subject)
	return recordedSub{c, subject}, nil
}

func (c *subjectsConn) state() (served, stopped []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.served), slices.Sorted(slices.Values(c.stopped))
}

// TestProviderServesOneSubjectPerRoom: the provider subscribes each room's call subject
// (no wildcard) once it is started, a room named before Start at Start, each once; stops a
// room's subscription when told; and bounds its calls over all rooms together.
func TestProviderServesOneSubjectPerRoom(t *testing.T) {
	f := newFixture(t)
	conn := &subjectsConn{}
	f.p.cfg.Conn = conn
	a := f.a.ID()
	if err := f.p.ServeRoom(testRoom); err != nil {
		t.Fatal(err)
	}
	if served, _ := conn.state(); len(served) != 0 {
		t.Fatalf("served before Start: %v", served)
	}
	if err := f.p.Start(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"r2", "r2", testRoom} {
		if err := f.p.ServeRoom(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.p.ServeRoom("Not a room"); err == nil {
		t.Fatal("served an invalid room id")
	}
	served, _ := conn.state()
	if !slices.Equal(served, []string{CallSubject(testRoom, a), CallSubject("r2", a)}) {
		t.Fatalf("served %v", served)
	}
	if err := f.p.StopRoom(testRoom); err != nil {
		t.Fatal(err)
	}
	if err := f.p.StopRoom("r3"); err != nil {
		t.Fatal(err)
	}
	if _, stopped := conn.state(); !slices.Equal(stopped, []string{CallSubject(testRoom, a)}) {
		t.Fatalf("stopped %v", stopped)
	}

	// The concurrency bound is the provider's, over all rooms: with every slot taken, a
	// call on any room's subscription is answered busy without running.
	for range cap(f.p.slots) {
		f.p.slots <- struct{}{}
	}
	prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), time.Now())
	var busy busport.Msg
	(*providerHandler)(f.p).ServeMsg(context.Background(), CallSubject(testRoom, a), prep.data, func(m busport.Msg) { busy = m })
	r, err := openReply(busy, prep.call, prep.link)
	if err != nil || r.Code != CodeBusy {
		t.Fatalf("a call beyond the bound: %+v, %v", r, err)
	}
	for range cap(f.p.slots) {
		<-f.p.slots
	}
	if f.inv.count("light/set_color") != 0 {
		t.Fatal("the invoker ran beyond the bound")
	}
	if _, err := f.call(t, f.b, invoke("light", "set_color", `{}`), time.Now()); err != nil {
		t.Fatalf("a call within the bound: %v", err)
	}

	if err := f.p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, stopped := conn.state(); !slices.Equal(stopped, []string{CallSubject(testRoom, a), CallSubject("r2", a)}) {
		t.Fatalf("stopped after Close %v", stopped)
	}
}
