package capclient

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
)

// fakeInst is an adapter child without a process, for timing tests under synctest (whose
// fake clock cannot govern real children).
type fakeInst struct {
	pid   int
	descs []capadapter.Descriptor
	canon [][]byte
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	fail  error
	stuck bool // Close does not reap it: Done never closes
}

func (f *fakeInst) PID() int                             { return f.pid }
func (f *fakeInst) Descriptors() []capadapter.Descriptor { return f.descs }
func (f *fakeInst) canonical() [][]byte                  { return f.canon }
func (f *fakeInst) Done() <-chan struct{}                { return f.done }
func (f *fakeInst) Failure() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fail
}
func (f *fakeInst) startResult(_ context.Context, req capadapter.Request, done func(json.RawMessage, error)) {
	if req.Method == capadapter.MethodObserve {
		done(json.RawMessage(`{"fake":true}`), nil)
		return
	}
	done(json.RawMessage(`true`), nil)
}
func (f *fakeInst) Close(context.Context) error {
	f.mu.Lock()
	stuck := f.stuck
	f.mu.Unlock()
	if stuck {
		return newError(capadapter.CodeUnavailable, "scripted: not reaped")
	}
	f.once.Do(func() { close(f.done) })
	return nil
}
func (f *fakeInst) crash(code string) {
	f.mu.Lock()
	f.fail = newError(code, "crash")
	f.mu.Unlock()
	f.once.Do(func() { close(f.done) })
}

// fakeSpawner starts fakeInsts; the capability id comes from the registration's last arg.
type fakeSpawner struct {
	mu       sync.Mutex
	times    []time.Time
	insts    []*fakeInst
	failNext int
	version  string
}

func (fs *fakeSpawner) spawn(_ context.Context, reg Registration, _ *logRing) (instance, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.times = append(fs.times, time.Now())
	if fs.failNext > 0 {
		fs.failNext--
		return nil, newError(capadapter.CodeTimeout, "scripted start failure")
	}
	id := reg.Args[len(reg.Args)-1]
	v := fs.version
	if v == "" {
		v = "1"
	}
	d := capadapter.Descriptor{CapabilityID: id, Title: "Fake", Version: v, Observe: true, Actions: []capadapter.Action{}}
	canon, _ := json.Marshal(&d) // as ParseDescriptor canonicalizes
	f := &fakeInst{pid: 1000 + len(fs.insts), descs: []capadapter.Descriptor{d}, canon: [][]byte{canon}, done: make(chan struct{})}
	fs.insts = append(fs.insts, f)
	return f, nil
}

func (fs *fakeSpawner) last() *fakeInst {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.insts[len(fs.insts)-1]
}

func (fs *fakeSpawner) gaps(from int) []time.Duration {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []time.Duration
	for i := from + 1; i < len(fs.times); i++ {
		out = append(out, fs.times[i].Sub(fs.times[i-1]))
	}
	return out
}

func fakeSupervisor(t *testing.T, opts Options) (*Supervisor, *fakeSpawner) {
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeSpawner{}
	s.spawn = fs.spawn
	return s, fs
}

func TestBackoffNext(t *testing.T) {
	b := backoff{min: DefaultBackoffMin, max: DefaultBackoffMax}
	want := []time.Duration{250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000}
	for i, w := range want {
		if got := b.next(); got != w*time.Millisecond {
			t.Fatalf("delay %d = %v, want %v", i, got, w*time.Millisecond)
		}
	}
	b.reset()
	if got := b.next(); got != DefaultBackoffMin {
		t.Fatalf("after reset: %v", got)
	}
}

// The restart schedule, on synctest's fake clock: delays double from BackoffMin to
// BackoffMax, capabilities are unavailable meanwhile, a healthy period resets the delay, and
// restarts stop at MaxRestartFailures.
func TestSupervisorRestartSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, fs := fakeSupervisor(t, Options{MaxRestartFailures: 10})
		defer s.Close(context.Background())
		reg := helperRegistration(t, "fake", "unused", "cap_a")
		if _, err := s.Register(context.Background(), reg); err != nil {
			t.Fatal(err)
		}
		ms := func(ds ...int) []time.Duration {
			var out []time.Duration
			for _, d := range ds {
				out = append(out, time.Duration(d)*time.Millisecond)
			}
			return out
		}
		equal := func(got, want []time.Duration) {
			t.Helper()
			if len(got) != len(want) {
				t.Fatalf("gaps = %v, want %v", got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("gaps = %v, want %v", got, want)
				}
			}
		}

		// Crash: backoff, unavailable, then a restart exactly BackoffMin later.
		crashAt := time.Now()
		fs.last().crash(capadapter.CodeMalformedResponse)
		synctest.Wait()
		st := s.Status()[0]
		if st.State != StateBackoff || st.LastFailure != capadapter.CodeMalformedResponse || st.PID != 0 {
			t.Fatalf("after crash: %+v", st)
		}
		if s.List()[0].Available || s.Ready("cap_a") {
			t.Fatal("capability available during backoff")
		}
		_, err := s.Observe(context.Background(), "cap_a")
		wantCode(t, err, capadapter.CodeUnavailable)
		time.Sleep(DefaultBackoffMin)
		synctest.Wait()
		if st := s.Status()[0]; st.State != StateReady || st.Restarts != 1 || st.PID != 1001 {
			t.Fatalf("after restart: %+v", st)
		}
		if got := fs.times[1].Sub(crashAt); got != DefaultBackoffMin {
			t.Fatalf("first restart after %v", got)
		}
		if _, err := s.Observe(context.Background(), "cap_a"); err != nil {
			t.Fatal(err)
		}

		// An immediate second crash and two failed starts: 500 ms, 1 s, 2 s.
		fs.mu.Lock()
		fs.failNext = 2
		fs.mu.Unlock()
		fs.last().crash(capadapter.CodeUnavailable)
		time.Sleep(4 * time.Second)
		synctest.Wait()
		equal(fs.gaps(1), ms(500, 1000, 2000))
		if st := s.Status()[0]; st.State != StateReady || st.Restarts != 4 {
			t.Fatalf("after failed starts: %+v", st)
		}

		// A healthy minute resets the schedule: the next restart comes BackoffMin after the crash.
		time.Sleep(DefaultHealthyAfter)
		n := len(fs.times)
		crashAt = time.Now()
		fs.last().crash(capadapter.CodeUnavailable)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := fs.times[n].Sub(crashAt); got != DefaultBackoffMin {
			t.Fatalf("restart after a healthy run came %v after the crash, want %v", got, DefaultBackoffMin)
		}
		if st := s.Status()[0]; st.State != StateReady {
			t.Fatalf("after healthy crash: %+v", st)
		}

		// A crash loop right after: the delays keep doubling up to the cap, and after
		// MaxRestartFailures consecutive failures the adapter is failed.
		n = len(fs.times)
		fs.mu.Lock()
		fs.failNext = 1000
		fs.mu.Unlock()
		crashAt = time.Now()
		fs.last().crash(capadapter.CodeUnavailable)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if got := fs.times[n].Sub(crashAt); got != 500*time.Millisecond {
			t.Fatalf("first crash-loop restart after %v", got)
		}
		equal(fs.gaps(n), ms(1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000))
		st = s.Status()[0]
		if st.State != StateFailed || st.LastFailure != capadapter.CodeTimeout {
			t.Fatalf("after crash loop: %+v", st)
		}
		if err := s.Remove(context.Background(), "fake"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSupervisorRestartWithChangedDescriptors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, fs := fakeSupervisor(t, Options{})
		defer s.Close(context.Background())
		if _, err := s.Register(context.Background(), helperRegistration(t, "fake", "unused", "cap_a")); err != nil {
			t.Fatal(err)
		}
		fs.mu.Lock()
		fs.version = "2"
		fs.mu.Unlock()
		fs.last().crash(capadapter.CodeUnavailable)
		time.Sleep(DefaultBackoffMin)
		synctest.Wait()
		st := s.Status()[0]
		if st.State != StateBackoff || st.LastFailure != capadapter.CodeDescriptorChanged {
			t.Fatalf("status = %+v", st)
		}
		// Re-registering accepts the new descriptors.
		if _, err := s.Register(context.Background(), helperRegistration(t, "fake", "unused", "cap_a")); err != nil {
			t.Fatal(err)
		}
		if d, _ := s.Describe("cap_a"); d.Version != "2" {
			t.Fatalf("descriptor = %+v", d)
		}
	})
}

func TestSupervisorTooManyAdapters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := fakeSupervisor(t, Options{})
		defer s.Close(context.Background())
		for i := range MaxAdapters {
			if _, err := s.Register(context.Background(), helperRegistration(t, "a"+strconv.Itoa(i), "unused", "cap_"+strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
		_, err := s.Register(context.Background(), helperRegistration(t, "one-more", "unused", "cap_x"))
		wantCode(t, err, capadapter.CodeTooManyAdapters)
		// Replacing an existing registration is still allowed.
		if _, err := s.Register(context.Background(), helperRegistration(t, "a0", "unused", "cap_0")); err != nil {
			t.Fatal(err)
		}
	})
}

// Restore keeps a persisted registration whose first start fails, and adopts its
// descriptors at the first start that succeeds without a conflict.
func TestSupervisorRestoreRetriesInBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, fs := fakeSupervisor(t, Options{})
		defer s.Close(context.Background())
		if _, err := s.Register(context.Background(), helperRegistration(t, "first", "unused", "cap_a")); err != nil {
			t.Fatal(err)
		}
		fs.mu.Lock()
		fs.failNext = 1
		fs.mu.Unlock()
		if _, err := s.Restore(context.Background(), helperRegistration(t, "late", "unused", "cap_b")); err != nil {
			t.Fatal(err)
		}
		st := s.Status()[1]
		if st.Name != "late" || st.State != StateBackoff || st.LastFailure != capadapter.CodeTimeout || len(st.Capabilities) != 0 {
			t.Fatalf("restored status = %+v", st)
		}
		_, err := s.Observe(context.Background(), "cap_b")
		wantCode(t, err, capadapter.CodeUnknownCapability)
		time.Sleep(DefaultBackoffMin)
		synctest.Wait()
		if st := s.Status()[1]; st.State != StateReady || len(st.Capabilities) != 1 {
			t.Fatalf("after restart = %+v", st)
		}
		if _, err := s.Observe(context.Background(), "cap_b"); err != nil {
			t.Fatal(err)
		}

		// A restored registration whose ids another adapter owns waits for them.
		if _, err := s.Restore(context.Background(), helperRegistration(t, "dup", "unused", "cap_a")); err != nil {
			t.Fatal(err)
		}
		if st := s.Status()[0]; st.Name != "dup" || st.LastFailure != capadapter.CodeCapabilityConflict {
			t.Fatalf("conflicting restore = %+v", st)
		}
		if err := s.Remove(context.Background(), "first"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultBackoffMin)
		synctest.Wait()
		if st := s.Status()[0]; st.State != StateReady || st.Capabilities[0] != "cap_a" {
			t.Fatalf("after the owner left = %+v", st)
		}
		// Restore still refuses what can never work.
		_, err = s.Restore(context.Background(), Registration{Name: "bad", Command: "./relative"})
		wantCode(t, err, capadapter.CodeInvalidRegistration)
	})
}

// Close reports a child it could not reap, so that the daemon can warn; a clean Close is nil.
func TestSupervisorCloseReportsUnreapedChild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, fs := fakeSupervisor(t, Options{})
		for _, name := range []string{"a", "b", "c"} {
			if _, err := s.Register(context.Background(), helperRegistration(t, name, "unused", "cap_"+name)); err != nil {
				t.Fatal(err)
			}
		}
		stuck := fs.insts[1]
		stuck.mu.Lock()
		stuck.stuck = true
		stuck.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := s.Close(ctx)
		e := wantCode(t, err, capadapter.CodeTimeout)
		if !strings.Contains(e.Detail, `"b"`) || strings.Contains(e.Detail, `"a"`) || strings.Contains(e.Detail, `"c"`) {
			t.Fatalf("Close = %v, want only adapter b named", err)
		}

		s2, _ := fakeSupervisor(t, Options{})
		if _, err := s2.Register(context.Background(), helperRegistration(t, "a", "unused", "cap_a")); err != nil {
			t.Fatal(err)
		}
		if err := s2.Close(context.Background()); err != nil {
			t.Fatalf("clean Close = %v", err)
		}
	})
}
