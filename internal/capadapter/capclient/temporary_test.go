package capclient

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
)

// removals records what the removal hooks are told.
type removals struct {
	mu  sync.Mutex
	got []Removal
}

func (r *removals) hook(x Removal) {
	r.mu.Lock()
	r.got = append(r.got, x)
	r.mu.Unlock()
}

func (r *removals) reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, x := range r.got {
		out = append(out, x.Registration.Name+":"+x.Reason)
	}
	return out
}

// scriptRegistration runs /bin/sh on a script in a temporary directory (the fake spawner
// never executes it); the capability id is the last argument.
func scriptRegistration(t *testing.T, name string) (Registration, string) {
	t.Helper()
	const sh = "/bin/sh"
	script := filepath.Join(t.TempDir(), "adapter.sh")
	if err := os.WriteFile(script, []byte("echo one\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return Registration{Name: name, Command: sh, Args: []string{"-e", script, "cap_" + name}}, script
}

func TestScriptPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.py")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, command string
		args          []string
		want          string
	}{
		{"first file after options", "/usr/bin/python3", []string{"-u", file}, file},
		{"relative to the start directory", "/usr/bin/python3", []string{"a.py"}, file},
		{"versioned python", "/usr/bin/python3.12", []string{file}, file},
		{"a module is no file", "/usr/bin/python3", []string{"-m", "pkg"}, ""},
		{"a non-file then a file", "/bin/bash", []string{"nothere", file}, file},
		{"a directory is no script", "/usr/bin/node", []string{dir}, ""},
		{"not an interpreter", "/usr/bin/lamp", []string{file}, ""},
		{"python3x is not python3.N", "/usr/bin/python3x", []string{file}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ScriptPath(tt.command, tt.args, dir); got != tt.want {
				t.Fatalf("ScriptPath = %q, want %q", got, tt.want)
			}
		})
	}
}

// A lease ends on the supervisor's own timer: the child is stopped, the registration is
// gone, and the hook is told lease_expired; a later lease and a replaced lease are honoured.
func TestLeaseExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, fs := fakeSupervisor(t, Options{})
		defer s.Close(context.Background())
		var rm removals
		s.OnRemove(rm.hook)
		ctx := context.Background()
		short := helperRegistration(t, "short", "unused", "cap_short")
		short.LeaseExpires = time.Now().Add(time.Hour)
		long := helperRegistration(t, "long", "unused", "cap_long")
		long.LeaseExpires = time.Now().Add(3 * time.Hour)
		if _, err := s.Register(ctx, long); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Register(ctx, short); err != nil {
			t.Fatal(err)
		}
		child := fs.last()
		st := statusOf(t, s, "short")
		if !st.LeaseExpires.Equal(short.LeaseExpires) || st.State != StateReady {
			t.Fatalf("status = %+v", st)
		}

		time.Sleep(time.Hour - time.Second)
		synctest.Wait()
		if len(s.Status()) != 2 {
			t.Fatalf("removed before its lease ended: %v", rm.reasons())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if names := statusNames(s); !slices.Equal(names, []string{"long"}) {
			t.Fatalf("after the first lease: %v", names)
		}
		select {
		case <-child.Done():
		default:
			t.Fatal("the expired adapter's child was not stopped")
		}
		if got := rm.reasons(); !slices.Equal(got, []string{"short:lease_expired"}) {
			t.Fatalf("hooks told %v", got)
		}
		if _, err := s.Observe(ctx, "cap_short"); capadapter.CodeOf(err) != capadapter.CodeUnknownCapability {
			t.Fatalf("observe after expiry: %v", err)
		}

		// Re-registering "long" without a lease replaces its lease: it never expires.
		long.LeaseExpires = time.Time{}
		if _, err := s.Register(ctx, long); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Hour)
		synctest.Wait()
		if names := statusNames(s); !slices.Equal(names, []string{"long"}) {
			t.Fatalf("the unleased registration was removed: %v", names)
		}
		if got := rm.reasons(); !slices.Equal(got, []string{"short:lease_expired", "long:replaced"}) {
			t.Fatalf("hooks told %v", got)
		}
	})
}

func statusNames(s *Supervisor) []string {
	var out []string
	for _, st := range s.Status() {
		out = append(out, st.Name)
	}
	return out
}

// An ended lease is refused (lease_expired); one beyond MaxLease is invalid; ties are checked.
func TestLeaseAndTieRules(t *testing.T) {
	s, _ := fakeSupervisor(t, Options{})
	defer s.Close(context.Background())
	ctx := context.Background()
	reg := helperRegistration(t, "lamp", "unused", "cap_lamp")
	past := reg
	past.LeaseExpires = time.Now().Add(-time.Second)
	for _, f := range []func(context.Context, Registration) (Registration, error){s.Register, s.Restore} {
		if _, err := f(ctx, past); !errors.Is(err, capadapter.ErrLeaseExpired) {
			t.Fatalf("ended lease: %v", err)
		}
	}
	far := reg
	far.LeaseExpires = time.Now().Add(MaxLease + time.Hour)
	bad := []Registration{far}
	for _, mut := range []func(*Registration){
		func(r *Registration) { r.Room = "Bad Room" },
		func(r *Registration) { r.Room, r.Session, r.Generation = "r1", "s", 1 },
		func(r *Registration) { r.Session = "s" },
		func(r *Registration) { r.Generation = 2 },
		func(r *Registration) { r.Session, r.Generation = "s\n", 1 },
	} {
		r := reg
		mut(&r)
		bad = append(bad, r)
	}
	for _, r := range bad {
		if _, err := s.Register(ctx, r); !errors.Is(err, capadapter.ErrInvalidRegistration) {
			t.Fatalf("Register(%+v) = %v", r, err)
		}
	}
	if len(s.Status()) != 0 {
		t.Fatal("a refused registration was installed")
	}
}

// A changed script is refused at re-register, at the crash-restart path and at restore with
// adapter_changed until Approve records the new digest and starts it.
func TestChangedScriptNeedsApproval(t *testing.T) {
	s, fs := fakeSupervisor(t, Options{BackoffMin: time.Millisecond, BackoffMax: time.Millisecond})
	defer s.Close(context.Background())
	var rm removals
	s.OnRemove(rm.hook)
	ctx := context.Background()
	reg, script := scriptRegistration(t, "lamp")
	got, err := s.Register(ctx, reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Digests) != 2 || got.Digests[0].Role != RoleExecutable || got.Digests[1].Role != RoleScript ||
		got.Digests[1].Path != script || len(got.Digests[1].SHA256) != 64 {
		t.Fatalf("digests = %+v", got.Digests)
	}
	recorded := got.Digests[1].SHA256

	if err := os.WriteFile(script, []byte("echo two\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(ctx, reg); !errors.Is(err, capadapter.ErrAdapterChanged) {
		t.Fatalf("re-register of a changed script: %v", err)
	}
	if st := statusOf(t, s, "lamp"); st.State != StateReady {
		t.Fatalf("a refused re-register changed the adapter: %+v", st)
	}

	// The child crashes: the restart is refused, and the OnChanged hooks are told.
	changedTold := make(chan string, 4)
	s.OnChanged(func(r Registration) { changedTold <- r.Name })
	fs.last().crash(capadapter.CodeMalformedResponse)
	eventually(t, 5*time.Second, "state changed", func() bool { return statusOf(t, s, "lamp").State == StateChanged })
	select {
	case name := <-changedTold:
		if name != "lamp" {
			t.Fatalf("OnChanged told %q", name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnChanged was not told of the changed script")
	}
	st := statusOf(t, s, "lamp")
	if st.LastFailure != capadapter.CodeAdapterChanged || st.PID != 0 || len(st.Digests) != 2 ||
		st.Digests[1].Recorded != recorded[:DigestPrefixLen] || st.Digests[1].Current == "" ||
		st.Digests[1].Current == st.Digests[1].Recorded || st.Digests[0].Current != "" {
		t.Fatalf("changed status = %+v", st)
	}
	if n := len(fs.insts); n != 1 {
		t.Fatalf("%d starts, want 1", n)
	}
	if _, err := s.Observe(ctx, "cap_lamp"); capadapter.CodeOf(err) != capadapter.CodeUnavailable {
		t.Fatalf("observe while changed: %v", err)
	}

	ap, err := s.Approve(ctx, "lamp")
	if err != nil {
		t.Fatal(err)
	}
	if !ap.Restarted || len(ap.Changes) != 2 || ap.Changes[1].Old != recorded || ap.Changes[1].New == recorded ||
		ap.Changes[0].Old != ap.Changes[0].New {
		t.Fatalf("approval = %+v", ap)
	}
	if st := statusOf(t, s, "lamp"); st.State != StateReady || st.Digests[1].Current != "" {
		t.Fatalf("after approve: %+v", st)
	}
	if got := rm.reasons(); !slices.Equal(got, []string{"lamp:replaced"}) {
		t.Fatalf("hooks told %v", got)
	}
	// Approving unchanged files does nothing.
	if ap, err := s.Approve(ctx, "lamp"); err != nil || ap.Restarted {
		t.Fatalf("second approve = %+v, %v", ap, err)
	}
	if _, err := s.Approve(ctx, "nobody"); !errors.Is(err, capadapter.ErrUnknownAdapter) {
		t.Fatalf("approve unknown: %v", err)
	}

	// A restore with the old digests installs it changed and starts nothing; one without
	// digests (stored before they existed) records them.
	approved := s.Registrations()[0]
	if err := os.WriteFile(script, []byte("echo three\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	s2, fs2 := fakeSupervisor(t, Options{})
	defer s2.Close(context.Background())
	s2.OnChanged(func(r Registration) { changedTold <- r.Name })
	if _, err := s2.Restore(ctx, approved); err != nil {
		t.Fatal(err)
	}
	if len(changedTold) != 1 || <-changedTold != "lamp" {
		t.Fatal("OnChanged was not told of the restore of a changed registration")
	}
	if st := statusOf(t, s2, "lamp"); st.State != StateChanged || st.LastFailure != capadapter.CodeAdapterChanged || len(fs2.insts) != 0 {
		t.Fatalf("restored changed: %+v, %d starts", st, len(fs2.insts))
	}
	legacy := approved
	legacy.Name, legacy.Digests = "legacy", nil
	legacy.Args = []string{script, "cap_legacy"}
	r, err := s2.Restore(ctx, legacy)
	if err != nil || len(r.Digests) != 2 || statusOf(t, s2, "legacy").State != StateReady {
		t.Fatalf("legacy restore = %+v, %v", r, err)
	}
	if err := s2.Remove(ctx, "lamp"); err != nil {
		t.Fatalf("remove a changed adapter: %v", err)
	}
}

// RemoveWhere removes by tie and tells the hooks the reason.
func TestRemoveWhereRoom(t *testing.T) {
	s, _ := fakeSupervisor(t, Options{})
	defer s.Close(context.Background())
	var rm removals
	s.OnRemove(rm.hook)
	ctx := context.Background()
	for _, n := range []string{"a", "b", "c"} {
		reg := helperRegistration(t, n, "unused", "cap_"+n)
		if n != "c" {
			reg.Room = "kitchen"
		}
		if _, err := s.Register(ctx, reg); err != nil {
			t.Fatal(err)
		}
	}
	got := s.RemoveWhere(ctx, ReasonRoomClosed, func(r Registration) bool { return r.Room == "kitchen" })
	if !slices.Equal(got, []string{"a", "b"}) || !slices.Equal(statusNames(s), []string{"c"}) {
		t.Fatalf("removed %v, left %v", got, statusNames(s))
	}
	if r := rm.reasons(); !slices.Equal(r, []string{"a:room_closed", "b:room_closed"}) {
		t.Fatalf("hooks told %v", r)
	}
	if rm.got[0].Capabilities[0] != "cap_a" {
		t.Fatalf("removal = %+v", rm.got[0])
	}
}

// The removal hooks run before the removed child stops, for every reason, and for a
// replacement after the new child passed validation: what a hook withdraws is withdrawn
// while the old, approved code still answers for the capabilities.
func TestRemovalHookRunsBeforeTheChildStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, fs := fakeSupervisor(t, Options{})
		defer s.Close(context.Background())
		ctx := context.Background()
		var mu sync.Mutex
		var seen []string
		var child *fakeInst // the child the next removal must find running
		s.OnRemove(func(r Removal) {
			mu.Lock()
			defer mu.Unlock()
			state := "running"
			select {
			case <-child.Done():
				state = "stopped"
			default:
			}
			if r.Reason == ReasonReplaced && len(fs.insts) != 2 {
				state += ",replacement-not-started"
			}
			seen = append(seen, r.Reason+":"+state)
		})
		step := func(do func()) {
			mu.Lock()
			child = fs.last()
			mu.Unlock()
			do()
		}

		reg := helperRegistration(t, "a", "unused", "cap_a")
		reg.LeaseExpires = time.Now().Add(time.Hour)
		if _, err := s.Register(ctx, reg); err != nil {
			t.Fatal(err)
		}
		step(func() {
			if _, err := s.Register(ctx, reg); err != nil {
				t.Fatal(err)
			}
		})
		step(func() {
			time.Sleep(time.Hour)
			synctest.Wait()
		})
		for _, reason := range []string{ReasonRoomClosed, ReasonRemoved} {
			reg.LeaseExpires = time.Time{}
			if _, err := s.Register(ctx, reg); err != nil {
				t.Fatal(err)
			}
			step(func() {
				if reason == ReasonRemoved {
					if err := s.Remove(ctx, "a"); err != nil {
						t.Fatal(err)
					}
				} else if got := s.RemoveWhere(ctx, reason, func(Registration) bool { return true }); len(got) != 1 {
					t.Fatalf("RemoveWhere removed %v", got)
				}
			})
		}
		mu.Lock()
		defer mu.Unlock()
		want := []string{"replaced:running", "lease_expired:running", "room_closed:running", "removed:running"}
		if !slices.Equal(seen, want) {
			t.Fatalf("hooks saw %v, want %v", seen, want)
		}
		if len(s.Status()) != 0 {
			t.Fatalf("left running: %+v", s.Status())
		}
	})
}
