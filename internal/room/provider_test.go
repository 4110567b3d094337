package room

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestProviderAuthorizationMatrix(t *testing.T) {
	f := newFixture(t)
	now := time.Now()

	got, err := f.call(t, f.b, invoke("light", "set_color", `{"color": "#123456"}`), now)
	if err != nil || string(got) != `{"ok":true}` {
		t.Fatalf("published action: %s, %v", got, err)
	}
	if _, err := f.call(t, f.b, Request{Room: testRoom, Capability: "light", Operation: Observe}, now); err != nil {
		t.Fatalf("published observe: %v", err)
	}

	cases := []struct {
		name string
		key  *HostKey
		req  Request
		code string
	}{
		{"unpublished action", f.b, invoke("light", "explode", `{}`), CodeUnauthorized},
		{"unpublished capability", f.b, invoke("camera", "snap", `{}`), CodeUnauthorized},
		{"observe not published", f.b, Request{Room: testRoom, Capability: "printer", Operation: Observe}, CodeUnauthorized},
		{"non-member", f.c, invoke("light", "set_color", `{}`), CodeUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.call(t, tc.key, tc.req, now)
			wantCode(t, err, tc.code)
		})
	}

	t.Run("unknown room", func(t *testing.T) {
		// No directory of B's lets it prepare such a call; sealed directly, A refuses it.
		prep := sealDirect(t, f.b, f.a, Request{Room: "r2", Capability: "light", Operation: Observe}, now)
		_, err := f.send(context.Background(), prep, now)
		wantCode(t, err, CodeUnauthorized)
	})
	t.Run("another provider or room subject", func(t *testing.T) {
		prep := sealDirect(t, f.b, f.c, Request{Room: testRoom, Capability: "light", Operation: Observe}, now)
		if w := f.p.serve(context.Background(), CallSubject(testRoom, f.c.ID()), prep.data, now); replyCode(w) != CodeUnauthorized {
			t.Fatalf("call to another provider: %+v", w)
		}
		prep = f.prepare(t, f.b, Request{Room: testRoom, Capability: "light", Operation: Observe}, now)
		if w := f.p.serve(context.Background(), CallSubject("r9", f.a.ID()), prep.data, now); replyCode(w) != CodeUnauthorized {
			t.Fatalf("call on another room's subject: %+v", w)
		}
		// A reply from another provider than the one called is refused by the caller.
		if _, err := openReply(sealReply(f.c, nil, &Reply{Room: testRoom, Caller: f.b.ID(), RequestID: prep.RequestID(), Result: json.RawMessage(`{}`)}), prep.call, prep.link); CodeOf(err) != CodeInvalidReply {
			t.Fatalf("reply signed by another host: %v", err)
		}
		cl := mustLink(t, f.b, f.c)
		if _, err := openReply(sealReply(f.c, cl, &Reply{Room: testRoom, Caller: f.b.ID(), RequestID: prep.RequestID(), Result: json.RawMessage(`{}`)}), prep.call, prep.link); CodeOf(err) != CodeInvalidReply {
			t.Fatalf("reply authenticated by another host's link: %v", err)
		}
	})
	t.Run("after unpublish", func(t *testing.T) {
		f.pubs.Unpublish(testRoom, "light")
		defer f.pubs.Publish(Publication{Room: testRoom, Capability: "light", Actions: []string{"set_color"}, Observe: true})
		_, err := f.call(t, f.b, invoke("light", "set_color", `{}`), now)
		wantCode(t, err, CodeUnauthorized)
	})
	t.Run("after the adapter is withdrawn", func(t *testing.T) {
		if rooms := f.pubs.WithdrawCapability("light"); len(rooms) != 1 || rooms[0] != testRoom {
			t.Fatalf("withdrawn from %v", rooms)
		}
		defer f.pubs.Publish(Publication{Room: testRoom, Capability: "light", Actions: []string{"set_color"}, Observe: true})
		_, err := f.call(t, f.b, invoke("light", "set_color", `{}`), now)
		wantCode(t, err, CodeUnauthorized)
	})
	t.Run("publication to named members", func(t *testing.T) {
		f.setRoster(t, 2, f.a.ID(), f.b.ID(), f.c.ID())
		if err := f.pubs.Publish(Publication{Room: testRoom, Capability: "light", Actions: []string{"set_color"}, Members: []HostID{f.c.ID()}}); err != nil {
			t.Fatal(err)
		}
		_, err := f.call(t, f.b, invoke("light", "set_color", `{}`), now)
		wantCode(t, err, CodeUnauthorized)
		if _, err := f.call(t, f.c, invoke("light", "set_color", `{}`), now); err != nil {
			t.Fatalf("named member: %v", err)
		}
		f.pubs.Publish(Publication{Room: testRoom, Capability: "light", Actions: []string{"set_color"}, Observe: true})
	})
	t.Run("after member removal", func(t *testing.T) {
		f.setRoster(t, 3, f.a.ID(), f.c.ID())
		_, err := f.call(t, f.b, invoke("light", "set_color", `{}`), now)
		wantCode(t, err, CodeUnauthorized)
		// An older roster that still lists B does not bring it back.
		f.setRoster(t, 2, f.a.ID(), f.b.ID())
		_, err = f.call(t, f.b, invoke("light", "set_color", `{}`), now)
		wantCode(t, err, CodeUnauthorized)
		f.setRoster(t, 4, f.a.ID(), f.b.ID())
	})
	t.Run("forged MAC", func(t *testing.T) {
		prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), now)
		prep.call.MAC[0] ^= 1
		prep.data, _ = EncodeCall(prep.call)
		_, err := f.send(context.Background(), prep, now)
		wantCode(t, err, CodeUnauthorized)
	})
	t.Run("MAC with another link's key", func(t *testing.T) {
		f.setRoster(t, 5, f.a.ID(), f.b.ID(), f.c.ID())
		defer f.setRoster(t, 6, f.a.ID(), f.b.ID())
		for name, link := range map[string]*linkKeys{
			"C's link to A, claiming to be B": mustLink(t, f.c, f.a),
			"B's link to C":                   mustLink(t, f.b, f.c),
			"A's link to B (the other way)":   mustLink(t, f.a, f.b),
		} {
			prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), now)
			prep.call.MAC = link.macCall(prep.call.AuthBytes())
			prep.data, _ = EncodeCall(prep.call)
			_, err := f.send(context.Background(), prep, now)
			if CodeOf(err) != CodeUnauthorized {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
	t.Run("reply MAC reflected as a call", func(t *testing.T) {
		// The reply key of B's own link to A, which B holds, does not authenticate a call.
		prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), now)
		prep.call.MAC = prep.link.macReply(prep.call.AuthBytes())
		prep.data, _ = EncodeCall(prep.call)
		_, err := f.send(context.Background(), prep, now)
		wantCode(t, err, CodeUnauthorized)
		// And a call MAC does not authenticate a reply: B cannot be fed one of its own calls'
		// MACs as A's answer.
		good := f.prepare(t, f.b, invoke("light", "set_color", `{}`), now)
		r := &Reply{Room: testRoom, Provider: f.a.ID(), Caller: f.b.ID(), RequestID: good.RequestID(), Result: json.RawMessage(`{}`)}
		forged := cloneMsg(sealReply(f.a, good.link, r))
		forged.Header[hdrMAC] = []string{base64.StdEncoding.EncodeToString(good.link.macCall(r.authBytes()))}
		if _, err := openReply(forged, good.call, good.link); CodeOf(err) != CodeInvalidReply {
			t.Fatalf("a call MAC opened as a reply: %v", err)
		}
		if _, err := openReply(sealReply(f.a, good.link, r), good.call, good.link); err != nil {
			t.Fatalf("the genuine reply: %v", err)
		}
	})
	t.Run("tampered args", func(t *testing.T) {
		prep := f.prepare(t, f.b, invoke("light", "set_color", `{"color":"#000000"}`), now)
		signed := prep.call.AuthBytes()
		prep.call.Args = json.RawMessage(`{"color":"#ffffff"}`)
		prep.data, _ = EncodeCall(prep.call) // the args travel changed; the MAC is the old one
		if string(signed) == string(prep.call.AuthBytes()) {
			t.Fatal("the args are not covered by the authenticated bytes")
		}
		_, err := f.send(context.Background(), prep, now)
		wantCode(t, err, CodeUnauthorized)
	})
	t.Run("stale and future", func(t *testing.T) {
		for _, skew := range []time.Duration{-ClockWindow - time.Second, ClockWindow + time.Second} {
			prep, err := f.prepare(t, f.b, invoke("light", "set_color", `{}`), now.Add(skew)), error(nil)
			_ = err
			_, err = f.send(context.Background(), prep, now)
			wantCode(t, err, CodeUnauthorized)
		}
	})
	t.Run("replayed by another caller's identity", func(t *testing.T) {
		// C re-sends B's call under its own name: the MAC no longer matches.
		prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), now)
		prep.call.Caller = f.c.ID()
		prep.data, _ = EncodeCall(prep.call)
		_, err := f.send(context.Background(), prep, now)
		wantCode(t, err, CodeUnauthorized)
	})
	t.Run("invoker error code passes through", func(t *testing.T) {
		f.inv.mu.Lock()
		f.inv.err = errors.New("adapter said no")
		f.inv.mu.Unlock()
		defer func() { f.inv.mu.Lock(); f.inv.err = nil; f.inv.mu.Unlock() }()
		_, err := f.call(t, f.b, invoke("light", "set_color", `{}`), now)
		wantCode(t, err, "unsupported_action")
		var re *Error
		if !errors.As(err, &re) || !re.Remote {
			t.Fatalf("error %v is not marked remote", err)
		}
	})
	t.Run("result over the bound", func(t *testing.T) {
		big := fmt.Sprintf(`{"x":%q}`, make([]byte, MaxResultBytes))
		f.inv.mu.Lock()
		f.inv.result = json.RawMessage(big)
		f.inv.mu.Unlock()
		defer func() { f.inv.mu.Lock(); f.inv.result = json.RawMessage(`{"ok":true}`); f.inv.mu.Unlock() }()
		_, err := f.call(t, f.b, invoke("light", "set_color", `{}`), now)
		wantCode(t, err, CodeTooLarge)
	})
	if n := f.inv.count("light/explode") + f.inv.count("camera/snap"); n != 0 {
		t.Fatalf("the invoker ran %d refused calls", n)
	}
}

func TestProviderReauthorizesAtResultTime(t *testing.T) {
	for _, change := range []string{"unpublish", "member removed", "caller departed"} {
		t.Run(change, func(t *testing.T) {
			f := newFixture(t)
			f.dir.SetPresence(testRoom, f.b.ID(), true)
			f.inv.hold, f.inv.entered = make(chan struct{}), make(chan struct{})
			errc := make(chan error, 1)
			go func() {
				_, err := f.call(t, f.b, invoke("light", "set_color", `{}`), time.Now())
				errc <- err
			}()
			<-f.inv.entered
			switch change {
			case "unpublish":
				f.pubs.Unpublish(testRoom, "light")
			case "member removed":
				f.setRoster(t, 2, f.a.ID())
			case "caller departed":
				f.dir.SetPresence(testRoom, f.b.ID(), false)
			}
			close(f.inv.hold)
			wantCode(t, <-errc, CodeUnauthorized)
			if n := f.inv.count("light/set_color"); n != 1 {
				t.Fatalf("invoker ran %d times", n)
			}
		})
	}
}

func TestDuplicateWindow(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	caller := NewCaller(f.b, nil, f.peers)

	// A retry of the same signed call gets the recorded result; the invoker ran once.
	prep, err := caller.Prepare(Request{Room: testRoom, Provider: f.a.ID(), Capability: "light", Operation: Invoke, Action: "set_color", Args: json.RawMessage(`{}`), RequestID: "req-1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	_ = err
	for i := range 3 {
		got, err := f.send(context.Background(), prep, now.Add(time.Duration(i)*time.Second))
		if err != nil || string(got) != `{"ok":true}` {
			t.Fatalf("copy %d: %s %v", i, got, err)
		}
	}
	if n := f.inv.count("light/set_color"); n != 1 {
		t.Fatalf("invoker ran %d times for one call", n)
	}
	f.recordMu.Lock()
	if len(f.records) != 3 || f.records[0].Retry || !f.records[1].Retry || !f.records[2].Retry {
		t.Fatalf("call records = %+v", f.records)
	}
	f.recordMu.Unlock()

	// The same request id for a different call is duplicate_request.
	other, _ := caller.Prepare(Request{Room: testRoom, Provider: f.a.ID(), Capability: "light", Operation: Observe, RequestID: "req-1"}, now)
	_, err = f.send(context.Background(), other, now)
	wantCode(t, err, CodeDuplicateRequest)

	// Another caller's request ids are its own.
	f.setRoster(t, 2, f.a.ID(), f.b.ID(), f.c.ID())
	if _, err := f.call(t, f.c, Request{Room: testRoom, Capability: "light", Operation: Observe, RequestID: "req-1"}, now); err != nil {
		t.Fatalf("C's req-1: %v", err)
	}

	// Filling the window forgets the oldest call, and a copy of it is then refused rather
	// than run again.
	for i := range DuplicateWindowEntries {
		p, _ := caller.Prepare(Request{Room: testRoom, Provider: f.a.ID(), Capability: "light", Operation: Observe, RequestID: fmt.Sprintf("fill-%d", i)}, now.Add(time.Millisecond*time.Duration(i+1)))
		if _, err := f.send(context.Background(), p, now); err != nil {
			t.Fatalf("fill %d: %v", i, err)
		}
	}
	_, err = f.send(context.Background(), prep, now)
	wantCode(t, err, CodeDuplicateRequest)
	if n := f.inv.count("light/set_color"); n != 1 {
		t.Fatalf("invoker ran %d times after the window turned", n)
	}
}

func TestDuplicateWindowExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		prep, _ := NewCaller(f.b, nil, f.peers).Prepare(Request{Room: testRoom, Provider: f.a.ID(), Capability: "light", Operation: Observe, RequestID: "r"}, time.Now())
		if _, err := f.send(context.Background(), prep, time.Now()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DuplicateWindow + time.Second)
		// The record is gone, and so is the copy's acceptance: it is past the clock window.
		_, err := f.send(context.Background(), prep, time.Now())
		wantCode(t, err, CodeUnauthorized)
		f.p.window.mu.Lock()
		f.p.window.sweep(time.Now())
		_, kept := f.p.window.callers[f.b.ID()]
		f.p.window.mu.Unlock()
		if kept {
			t.Fatal("a caller with nothing left to remember is still kept")
		}
	})
}

func TestRetryWhileRunningWaitsForTheFirstCopy(t *testing.T) {
	f := newFixture(t)
	f.inv.hold, f.inv.entered = make(chan struct{}), make(chan struct{})
	prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), time.Now())
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() { _, err := f.send(context.Background(), prep, time.Now()); errs <- err })
	<-f.inv.entered
	wg.Go(func() { _, err := f.send(context.Background(), prep, time.Now()); errs <- err })
	// The copy finds the first admitted (it was, before the invoker ran) and waits for it.
	close(f.inv.hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := f.inv.count("light/set_color"); n != 1 {
		t.Fatalf("invoker ran %d times", n)
	}
}

func TestInFlightBoundPerCaller(t *testing.T) {
	f := newFixture(t)
	f.setRoster(t, 2, f.a.ID(), f.b.ID(), f.c.ID())
	f.inv.hold, f.inv.entered = make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, MaxInFlightPerCaller)
	for range MaxInFlightPerCaller {
		wg.Go(func() { _, err := f.call(t, f.b, invoke("light", "set_color", `{}`), time.Now()); errs <- err })
		<-f.inv.entered
	}
	_, err := f.call(t, f.b, invoke("light", "set_color", `{}`), time.Now())
	wantCode(t, err, CodeBusy)
	// Another caller is not held back by B's calls.
	done := make(chan error, 1)
	go func() { _, err := f.call(t, f.c, invoke("light", "set_color", `{}`), time.Now()); done <- err }()
	<-f.inv.entered
	close(f.inv.hold)
	if err := <-done; err != nil {
		t.Fatalf("C: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Once they ended, B may call again.
	f.inv.mu.Lock()
	f.inv.entered = nil
	f.inv.mu.Unlock()
	if _, err := f.call(t, f.b, invoke("light", "set_color", `{}`), time.Now()); err != nil {
		t.Fatalf("after the calls ended: %v", err)
	}
	if n := f.inv.count("light/set_color"); n != MaxInFlightPerCaller+2 {
		t.Fatalf("invoker ran %d times", n)
	}
}

func TestOverloadedIsBusy(t *testing.T) {
	f := newFixture(t)
	prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), time.Now())
	r, err := openReply((*providerHandler)(f.p).OverloadedMsg("", prep.data), prep.call, prep.link)
	if err != nil || r.Code != CodeBusy || r.MAC == nil {
		t.Fatalf("overloaded reply = %+v, %v", r, err)
	}
	// A caller A has no key for gets a busy signed with A's host key.
	prep = sealDirect(t, f.c, f.a, invoke("light", "set_color", `{}`), time.Now())
	r, err = openReply((*providerHandler)(f.p).OverloadedMsg("", prep.data), prep.call, prep.link)
	if err != nil || r.Code != CodeBusy || r.Sig == nil {
		t.Fatalf("overloaded reply to a non-member = %+v, %v", r, err)
	}
}

func TestPerCallApproval(t *testing.T) {
	for _, tc := range []struct {
		decide func(a *Approvals, id string) error
		code   string
	}{
		{func(a *Approvals, id string) error { return a.Approve(id) }, ""},
		{func(a *Approvals, id string) error { return a.Deny(id) }, CodeApprovalDenied},
		{nil, CodeApprovalTimeout},
	} {
		name := tc.code
		if name == "" {
			name = "approved"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t)
				start := time.Now()
				errc := make(chan error, 1)
				go func() {
					req := invoke("printer", "print", `{}`)
					req.AwaitApproval = true
					_, err := f.call(t, f.b, req, start)
					errc <- err
				}()
				synctest.Wait()
				pending := f.appr.Pending()
				if len(pending) != 1 || pending[0].Caller != f.b.ID() || pending[0].Action != "print" {
					t.Fatalf("pending = %+v", pending)
				}
				if f.inv.count("printer/print") != 0 {
					t.Fatal("invoked before approval")
				}
				if tc.decide != nil {
					if err := tc.decide(f.appr, pending[0].ID); err != nil {
						t.Fatal(err)
					}
				}
				err := <-errc
				wantCode(t, err, tc.code)
				wantRuns := 0
				if tc.code == "" {
					wantRuns = 1
				}
				if n := f.inv.count("printer/print"); n != wantRuns {
					t.Fatalf("invoker ran %d times", n)
				}
				if tc.code == CodeApprovalTimeout && time.Since(start) != ApprovalTimeout {
					t.Fatalf("timed out after %v, want %v", time.Since(start), ApprovalTimeout)
				}
				if len(f.appr.Pending()) != 0 {
					t.Fatal("a decided call is still pending")
				}
				err = f.appr.Approve(pending[0].ID)
				wantCode(t, err, CodeUnknownApproval)
			})
		})
	}
	t.Run("without the approval deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t)
			// A caller that does not wait for approval leaves the provider no time for it.
			_, err := f.call(t, f.b, invoke("printer", "print", `{}`), time.Now())
			wantCode(t, err, CodeApprovalTimeout)
		})
	})
	t.Run("own host needs no approval", func(t *testing.T) {
		f := newFixture(t)
		if _, err := f.call(t, f.a, invoke("printer", "print", `{}`), time.Now()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unpublished while waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t)
			errc := make(chan error, 1)
			go func() {
				req := invoke("printer", "print", `{}`)
				req.AwaitApproval = true
				_, err := f.call(t, f.b, req, time.Now())
				errc <- err
			}()
			synctest.Wait()
			f.pubs.Unpublish(testRoom, "printer")
			if err := f.appr.Approve(f.appr.Pending()[0].ID); err != nil {
				t.Fatal(err)
			}
			wantCode(t, <-errc, CodeUnauthorized)
			if f.inv.count("printer/print") != 0 {
				t.Fatal("invoked after unpublish")
			}
		})
	})
	// A caller that leaves (its presence deleted; it stays on the roster), is removed from the
	// roster, or a room this host forgets takes its waiting call out of the queue at once,
	// undecided, and the call is refused.
	for name, leave := range map[string]func(t *testing.T, f *fixture){
		"caller left while waiting":    func(_ *testing.T, f *fixture) { f.dir.SetPresence(testRoom, f.b.ID(), false) },
		"caller removed while waiting": func(t *testing.T, f *fixture) { f.setRoster(t, 2, f.a.ID(), f.c.ID()) },
		"room forgotten while waiting": func(_ *testing.T, f *fixture) { f.dir.Forget(testRoom) },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t)
				f.dir.SetPresence(testRoom, f.b.ID(), true)
				errc := make(chan error, 1)
				go func() {
					req := invoke("printer", "print", `{}`)
					req.AwaitApproval = true
					_, err := f.call(t, f.b, req, time.Now())
					errc <- err
				}()
				synctest.Wait()
				pending := f.appr.Pending()
				if len(pending) != 1 {
					t.Fatalf("pending = %+v", pending)
				}
				start := time.Now()
				leave(t, f)
				wantCode(t, <-errc, CodeUnauthorized)
				if time.Since(start) != 0 {
					t.Fatalf("the call waited %v after its caller went", time.Since(start))
				}
				if p := f.appr.Pending(); len(p) != 0 {
					t.Fatalf("still pending for a caller that went: %+v", p)
				}
				wantCode(t, f.appr.Approve(pending[0].ID), CodeUnknownApproval)
				if f.inv.count("printer/print") != 0 {
					t.Fatal("invoked for a caller that went")
				}
			})
		})
	}
}

func TestInvokeTimeoutAndProviderStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.inv.hold = make(chan struct{})
		start := time.Now()
		_, err := f.call(t, f.b, invoke("light", "set_color", `{}`), start)
		wantCode(t, err, CodeTimeout)
		if time.Since(start) != InvokeTimeout {
			t.Fatalf("timed out after %v", time.Since(start))
		}

		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			prep := f.prepare(t, f.b, invoke("light", "set_color", `{}`), time.Now())
			_, err := f.send(ctx, prep, time.Now())
			errc <- err
		}()
		synctest.Wait()
		cancel()
		wantCode(t, <-errc, CodeUnavailable)
	})
}

// TestProviderWithAStartInvoker runs the provider's tests again with an invoker that starts
// each call and ends it on another goroutine, as the daemon's capability supervisor does: the
// provider then runs the call without a goroutine of its own, and every check, bound and
// re-authorization must hold exactly as with an invoker that runs calls to their end.
func TestProviderWithAStartInvoker(t *testing.T) {
	withStartInvoker = true
	defer func() { withStartInvoker = false }()
	for _, test := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"authorization matrix", TestProviderAuthorizationMatrix},
		{"reauthorizes at result time", TestProviderReauthorizesAtResultTime},
		{"duplicate window", TestDuplicateWindow},
		{"duplicate window expires", TestDuplicateWindowExpires},
		{"retry while running", TestRetryWhileRunningWaitsForTheFirstCopy},
		{"in-flight bound", TestInFlightBoundPerCaller},
		{"overloaded", TestOverloadedIsBusy},
		{"per-call approval", TestPerCallApproval},
		{"invoke timeout and stop", TestInvokeTimeoutAndProviderStop},
		{"floors survive a restart", TestFloorsSurviveARestart},
		{"floor raise comes first", TestFloorRaiseComesFirstAndIsShared},
		{"floor raise failure", TestFloorRaiseFailure},
		{"floor raise wait ends with the provider", TestFloorRaiseWaitEndsWithTheProvider},
	} {
		t.Run(test.name, test.f)
	}
}
