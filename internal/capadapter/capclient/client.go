package capclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/trywrite"
)

// Call deadlines.
const (
	// DefaultCallTimeout is the deadline of one request: the protocol's V1 supervisor value.
	// An adapter answers from local state or one bounded device round trip; 1.5 s is long
	// for that and short enough that a stuck adapter does not stall its caller.
	DefaultCallTimeout = 1500 * time.Millisecond
	// DefaultStartTimeout bounds startup as a whole (list, then describe of every listed
	// capability), as the V1 supervisor does with one 1.5 s deadline for the handshake.
	DefaultStartTimeout = 1500 * time.Millisecond
	// MinCallTimeout and MaxCallTimeout bound a configured call or start timeout: below
	// 100 ms a healthy adapter on a loaded machine would be killed; above 30 s a hung one
	// blocks its capability for too long.
	MinCallTimeout = 100 * time.Millisecond
	MaxCallTimeout = 30 * time.Second
)

// Stop timing. Each wait is bounded, so stopping an adapter takes at most their sum.
const (
	// gracefulExitWait is how long a child has to exit after its stdin closes: an adapter
	// exits on EOF at once, so 300 ms (the V1 value) is ample.
	gracefulExitWait = 300 * time.Millisecond
	// termWait is how long the group has to exit after SIGTERM, for adapters that clean up.
	termWait = time.Second
	// killWait bounds the wait after SIGKILL, which only a process stuck in the kernel
	// survives; 2 s is the V1 value.
	killWait = 2 * time.Second
	// pipeDrainWait bounds how long, after the group was killed, the readers wait for EOF on
	// stdout and stderr; only a descendant that left the process group can hold them open.
	pipeDrainWait = time.Second
)

// ClientOptions tune a Client. The zero value uses the defaults.
type ClientOptions struct {
	// CallTimeout is the deadline of each call; zero means DefaultCallTimeout. It must lie
	// within [MinCallTimeout, MaxCallTimeout].
	CallTimeout time.Duration
	// PassEnv names variables the child gets from this process's environment, when set,
	// besides the allowlisted ones (see Registration.PassEnv); they must pass CheckPassEnv.
	PassEnv []string
	// Children, when set, is told of the child's process group as it starts and once it is
	// reaped (airlockd's ledger of the groups a crash could leave running: internal/orphan).
	Children ChildRecorder

	log *logRing // where stderr goes; nil gives the Client a ring of its own
}

// ChildRecorder keeps track of adapter children's process groups. Started is called with a
// child's pid (its process group id) once it runs; Reaped once it has been reaped and its
// group sent SIGKILL. Both may be called from any goroutine.
type ChildRecorder interface {
	Started(pid int)
	Reaped(pid int)
}

func (o ClientOptions) withDefaults() (ClientOptions, error) {
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.CallTimeout < MinCallTimeout || o.CallTimeout > MaxCallTimeout {
		return o, fmt.Errorf("capadapter: call timeout %v outside [%v, %v]", o.CallTimeout, MinCallTimeout, MaxCallTimeout)
	}
	if err := CheckPassEnv(o.PassEnv); err != nil {
		return o, err
	}
	if o.log == nil {
		o.log = newLogRing()
	}
	return o, nil
}

// Client is one adapter child process and the protocol spoken with it.
//
// The child runs without a shell, with the allowlisted environment (see envAllowlist) and
// the variables ClientOptions.PassEnv names, in a process group of its own. Its stdin and stdout carry only the protocol; stderr goes to a
// bounded ring that only Logs reads. One call is in flight at a time; later ones wait their
// turn in a bounded FIFO queue, without a goroutine each (see StartObserve). Any failed
// exchange (a malformed, oversized, unsolicited, duplicate, wrong-id or wrong-version frame,
// EOF, or a missed deadline) fails the call and kills the whole process group, so a stale
// response can never pair with a later request; the Client is then dead and every later call
// fails with unavailable. An error response with a protocol code is not a failure of the child.
//
// Goroutines: one reads stdout, one reads stderr, one waits for the process; the last of
// these reaps the child, kills what remains of its group, waits for both readers (and for the
// goroutine, if any, finishing a write the pipe did not take at once), and then closes Done.
// Close stops the child and waits for all of them. The stdout reader also ends each call that
// gets its answer and writes the next queued request, so a call costs no goroutine hand-off
// inside the Client.
type Client struct {
	pid         int
	stdin       *os.File
	stdinTry    *trywrite.Writer // stdin, for the write attempt that must not wait
	stdout      *os.File
	stderr      *os.File
	log         *logRing
	callTimeout time.Duration
	children    ChildRecorder // nil: none
	cmd         *exec.Cmd

	seq   atomic.Uint64 // last request id
	timer *time.Timer   // expires the active call (see armLocked and expire)
	// timerSet is whether timer is running, and timerAt when it fires; guarded by mu.
	timerSet bool
	timerAt  time.Time
	writers  sync.WaitGroup // goroutines finishing a write the pipe did not take at once

	stdoutDone chan struct{}
	stderrDone chan struct{}
	done       chan struct{}

	// mu guards the fields below. No done function of a call runs while it is held (see
	// release).
	mu       sync.Mutex
	active   *call   // the call whose request is written or being written; nil when idle
	queue    []*call // admitted calls waiting for the active one to end, FIFO
	writing  bool    // a goroutine owns stdin's write side (see write)
	pending  []byte  // the active call's frame, left for the owner of the write side
	ended    *call   // calls that ended and whose done has not run yet, oldest first
	lastEnd  *call
	failure  *capadapter.Error // why the child is dead or dying; nil while healthy
	exited   bool              // the group was killed after the leader exited: never signal again
	stopping bool              // Close began: EOF is expected, not a failure
	stdinOff bool
	state    *os.ProcessState

	descs []capadapter.Descriptor
	canon [][]byte
}

// Spawn starts command with args as an adapter child and returns without speaking to it.
// Most callers want Start, which also runs the startup handshake.
func Spawn(command string, args []string, opts ClientOptions) (*Client, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err1 := pipe()
	outR, outW, err2 := pipe()
	errR, errW, err3 := pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		closeAll()
		return nil, newError(capadapter.CodeUnavailable, "the adapter's pipes could not be created")
	}
	cmd := &exec.Cmd{
		Path:   command,
		Args:   append([]string{command}, args...),
		Env:    adapterEnv(opts.PassEnv),
		Stdin:  inR,
		Stdout: outW,
		Stderr: errW,
		// The child leads a group of its own, which Close and wait signal as a whole, and
		// is killed if this process dies first (the parent-death signal is tied to the
		// thread that starts it, and Go ends no thread but that of a goroutine that locked
		// it). A helper that the child starts in its group is not: ClientOptions.Children
		// records the group for the next start to kill.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, newError(capadapter.CodeUnavailable, "adapter command could not be started")
	}
	if opts.Children != nil {
		opts.Children.Started(cmd.Process.Pid)
	}
	// The child holds its ends now; closing ours makes EOF reach the readers when it exits.
	inR.Close()
	outW.Close()
	errW.Close()
	inTry, _ := trywrite.New(inW) // fails only for a nil *os.File
	c := &Client{
		pid:         cmd.Process.Pid,
		stdin:       inW,
		stdinTry:    inTry,
		stdout:      outR,
		stderr:      errR,
		log:         opts.log,
		callTimeout: opts.CallTimeout,
		children:    opts.Children,
		cmd:         cmd,
		stdoutDone:  make(chan struct{}),
		stderrDone:  make(chan struct{}),
		done:        make(chan struct{}),
	}
	c.timer = time.AfterFunc(time.Hour, c.expire)
	c.timer.Stop()
	c.log.note("started pid " + strconv.Itoa(c.pid))
	go c.readStdout()
	go func() {
		defer close(c.stderrDone)
		drainStderr(c.stderr, c.log)
	}()
	go c.wait()
	return c, nil
}

// Start spawns an adapter and runs the startup handshake within ctx: list, then describe of
// every listed capability, each describe byte-identical (canonically encoded) to its listed
// descriptor. ctx's deadline bounds the handshake as a whole, in place of the call timeout
// (an interpreter's start counts against the list); without one, each call has the call
// timeout. On any failure the child is killed and reaped before Start returns.
func Start(ctx context.Context, command string, args []string, opts ClientOptions) (*Client, error) {
	c, err := Spawn(command, args, opts)
	if err != nil {
		return nil, err
	}
	if _, err := c.Handshake(ctx); err != nil {
		c.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return c, nil
}

// Handshake runs list and the describes (see Start) and records the descriptors.
func (c *Client) Handshake(ctx context.Context) ([]capadapter.Descriptor, error) {
	descs, canon, err := c.handshake(ctx)
	if err != nil {
		c.fail(asError(err, capadapter.CodeUnavailable))
		return nil, err
	}
	c.mu.Lock()
	c.descs, c.canon = descs, canon
	c.mu.Unlock()
	return append([]capadapter.Descriptor(nil), descs...), nil
}

func (c *Client) handshake(ctx context.Context) ([]capadapter.Descriptor, [][]byte, error) {
	resp, err := c.call(ctx, capadapter.Request{Method: capadapter.MethodList}, startupCall)
	if err != nil {
		return nil, nil, err
	}
	if resp.ErrorCode != "" {
		return nil, nil, &capadapter.Error{Code: resp.ErrorCode, FromAdapter: true, Detail: "list failed"}
	}
	if capadapter.UnsafePayload(resp.Result) {
		return nil, nil, invalidDescriptor("list result carries a URL or a sensitive key")
	}
	var items []json.RawMessage
	if err := jsonArray(resp.Result, &items); err != nil {
		return nil, nil, invalidDescriptor("list result is not an array")
	}
	if len(items) == 0 || len(items) > capadapter.MaxCapabilities {
		return nil, nil, newError(capadapter.CodeCapabilityCount, "an adapter must list 1 to 8 capabilities")
	}
	descs := make([]capadapter.Descriptor, 0, len(items))
	canon := make([][]byte, 0, len(items))
	for _, item := range items {
		d, cb, err := capadapter.ParseDescriptor(item)
		if err != nil {
			return nil, nil, err
		}
		for _, prev := range descs {
			if prev.CapabilityID == d.CapabilityID {
				return nil, nil, invalidDescriptor("an adapter lists one capability id twice")
			}
		}
		descs = append(descs, d)
		canon = append(canon, cb)
	}
	for i, d := range descs {
		resp, err := c.call(ctx, capadapter.Request{Method: capadapter.MethodDescribe, CapabilityID: d.CapabilityID}, startupCall)
		if err != nil {
			return nil, nil, err
		}
		if resp.ErrorCode != "" {
			return nil, nil, &capadapter.Error{Code: resp.ErrorCode, FromAdapter: true, Detail: "describe failed"}
		}
		_, cb, err := capadapter.ParseDescriptor(resp.Result)
		if err != nil {
			return nil, nil, err
		}
		if !bytes.Equal(cb, canon[i]) {
			return nil, nil, invalidDescriptor("describe differs from the listed descriptor")
		}
	}
	return descs, canon, nil
}

// jsonArray decodes a strict JSON array of raw values.
func jsonArray(data []byte, items *[]json.RawMessage) error {
	if err := ndjson.Valid(data); err != nil {
		return err
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '[' {
		return errors.New("not an array")
	}
	return json.Unmarshal(data, items)
}

// Descriptors returns the descriptors the handshake accepted.
func (c *Client) Descriptors() []capadapter.Descriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]capadapter.Descriptor(nil), c.descs...)
}

func (c *Client) canonical() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.canon
}

// PID returns the child's process id, which is also its process group id.
func (c *Client) PID() int { return c.pid }

// Done is closed once the child has exited and been reaped, the rest of its process group
// killed, and its pipes drained and closed.
func (c *Client) Done() <-chan struct{} { return c.done }

// Failure returns why the child was killed or died, or nil while it is healthy and after a
// clean stop.
func (c *Client) Failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failure == nil {
		return nil
	}
	return c.failure
}

// Logs returns the child's kept stderr lines, for its operator only.
func (c *Client) Logs() []string { return c.log.snapshot() }

// ProcessState returns how the child ended once Done is closed (its exit status, or the
// signal that killed it), and nil before.
func (c *Client) ProcessState() *os.ProcessState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// signalLocked signals the child's whole process group, unless the group was already killed
// after the leader exited: from then on its id may be reused.
func (c *Client) signalLocked(sig syscall.Signal) {
	if !c.exited {
		_ = syscall.Kill(-c.pid, sig)
	}
}

func (c *Client) closeStdinLocked() {
	if !c.stdinOff {
		c.stdinOff = true
		c.stdin.Close()
	}
}

// asError returns err's *capadapter.Error, or a new one with code.
func asError(err error, code string) *capadapter.Error {
	var e *capadapter.Error
	if errors.As(err, &e) {
		return e
	}
	return newError(code, "adapter I/O failed")
}

// wait waits for the child to exit, kills what is left of its process group while the
// exited leader still holds the group id, reaps the leader, and waits for both readers.
func (c *Client) wait() {
	defer close(c.done)
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, c.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	c.mu.Lock()
	_ = syscall.Kill(-c.pid, syscall.SIGKILL) // descendants that kept the group alive
	c.exited = true
	c.mu.Unlock()
	_ = c.cmd.Wait()
	if c.children != nil {
		c.children.Reaped(c.pid)
	}

	timer := time.NewTimer(pipeDrainWait)
	for _, ch := range []chan struct{}{c.stdoutDone, c.stderrDone} {
		select {
		case <-ch:
			continue
		case <-timer.C:
		}
		break
	}
	timer.Stop()
	// A descendant that left the group may still hold the pipes: stop reading them.
	c.stdout.Close()
	c.stderr.Close()
	<-c.stdoutDone
	<-c.stderrDone

	c.mu.Lock()
	c.state = c.cmd.ProcessState
	if c.failure == nil && !c.stopping {
		c.failure = newError(capadapter.CodeUnavailable, "the adapter exited")
	}
	c.closeStdinLocked()
	// The reader ended every call when stdout ended; this only makes sure of it.
	c.endAllLocked(newError(capadapter.CodeUnavailable, "the adapter exited"))
	c.release(nil)
	c.writers.Wait() // unblocked: stdin is closed
	c.log.note("pid " + strconv.Itoa(c.pid) + " " + c.cmd.ProcessState.String())
}

// Close stops the child: it closes stdin and waits briefly for the child to exit, then
// SIGTERMs its process group and waits, then SIGKILLs the group and waits, each wait bounded
// (a done ctx skips straight to SIGKILL). It returns after the child is reaped and the
// goroutines have ended, with nil only when the child exited with status 0 after its stdin
// closed. Close is safe to call more than once and on a dead Client.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	c.stopping = true
	c.closeStdinLocked()
	c.mu.Unlock()

	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{0, gracefulExitWait}, {syscall.SIGTERM, termWait}, {syscall.SIGKILL, killWait}}
	for _, st := range steps {
		if st.sig != 0 {
			c.mu.Lock()
			c.signalLocked(st.sig)
			c.mu.Unlock()
		}
		if ctx.Err() != nil && st.sig != syscall.SIGKILL {
			continue
		}
		stop := ctx.Done()
		if st.sig == syscall.SIGKILL {
			stop = nil // the last wait is bounded by killWait alone
		}
		timer := time.NewTimer(st.wait)
		select {
		case <-c.done:
			timer.Stop()
			return c.exitError()
		case <-timer.C:
		case <-stop:
			timer.Stop()
		}
	}
	select {
	case <-c.done:
		return c.exitError()
	default:
		return fmt.Errorf("capadapter: adapter pid %d did not exit after SIGKILL", c.pid)
	}
}

func (c *Client) exitError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failure != nil {
		return c.failure
	}
	if c.state != nil && c.state.Success() {
		return nil
	}
	return fmt.Errorf("capadapter: adapter pid %d did not exit cleanly on stdin close: %v", c.pid, c.state)
}
