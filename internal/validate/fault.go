package validate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/ndjson"
)

// The built-in misbehaving adapters. Each fault probe starts one and passes when the runtime
// rejects it: capclient.Client fails the call with the expected code and the child is killed
// and reaped, its process group gone.
const (
	FaultMalformed = "malformed" // answers list with a line that is not JSON
	FaultOversized = "oversized" // answers list with a 65,537-byte frame
	FaultDuplicate = "duplicate" // answers every request twice
	FaultMissing   = "missing"   // answers list, never answers observe
	FaultCrash     = "crash"     // answers list, writes half an observe answer and exits 7
	FaultHangList  = "hang-list" // never answers, not even list
)

// FaultModes lists the built-in misbehaving adapters, in probe order.
var FaultModes = []string{FaultMalformed, FaultOversized, FaultDuplicate, FaultMissing, FaultCrash, FaultHangList}

// faultTimeout is the call deadline of the fault probes. They test the runtime, not an
// adapter, but each probe's first call goes to a child just spawned, whose start counts
// against it: 500 ms was missed by a race-built child on a loaded machine (CI), where the
// probe then saw timeout instead of the fault's code.
const faultTimeout = 2 * time.Second

// reapWait bounds how long a fault probe waits for the rejected child to be reaped.
const reapWait = 5 * time.Second

// faultCrashCode is the exit status of the crash adapter.
const faultCrashCode = 7

// RunFaultAdapter is the built-in misbehaving adapter mode: it serves in and out the way mode
// misbehaves and returns the process's exit status. Every mode exits once in closes, so a
// harness that failed to kill it leaves nothing running. An unknown mode returns 2.
func RunFaultAdapter(mode string, in io.Reader, out io.Writer) int {
	if !isFaultMode(mode) {
		return 2
	}
	r := ndjson.NewReader(in, capadapter.MaxFrameBytes-1)
	bw := bufio.NewWriter(out)
	write := func(s string) {
		bw.WriteString(s)
		bw.Flush()
	}
	answer := func(id string, result string) string {
		b, _ := json.Marshal(id)
		return `{"protocolVersion":1,"id":` + string(b) + `,"result":` + result + "}\n"
	}
	const descriptor = `{"capabilityId":"fault_probe","title":"Fault probe","version":"1","observe":true,"actions":[]}`
	for {
		line, err := r.Next()
		if err != nil {
			return 0
		}
		var req struct {
			ID     string `json:"id"`
			Method string `json:"method"`
		}
		_ = json.Unmarshal(line, &req)
		switch mode {
		case FaultHangList:
			continue
		case FaultMalformed:
			write("not-json\n")
			continue
		case FaultOversized:
			write(strings.Repeat(" ", capadapter.MaxFrameBytes) + "\n")
			continue
		case FaultDuplicate:
			a := answer(req.ID, "["+descriptor+"]")
			write(a + a)
			continue
		}
		switch req.Method {
		case capadapter.MethodList:
			write(answer(req.ID, "["+descriptor+"]"))
		case capadapter.MethodDescribe:
			write(answer(req.ID, descriptor))
		default:
			if mode == FaultCrash {
				write(`{"protocolVersion":1,"id":"` + req.ID + `","res`)
				return faultCrashCode
			}
			// FaultMissing: read on, never answer.
		}
	}
}

func isFaultMode(mode string) bool {
	for _, m := range FaultModes {
		if m == mode {
			return true
		}
	}
	return false
}

// faultProbe is what one fault probe does: the call that must fail, and its expected code.
type faultProbe struct {
	mode string
	want string
	// run makes the calls against a spawned child; nil means Start (the handshake) is the
	// call that must fail.
	run func(ctx context.Context, c *capclient.Client) error
}

func runFaultProbes(ctx context.Context, fault func(mode string) (string, []string), rep *Report) {
	list := func(ctx context.Context, c *capclient.Client) error {
		_, err := c.Call(ctx, capadapter.Request{Method: capadapter.MethodList})
		return err
	}
	listThenObserve := func(ctx context.Context, c *capclient.Client) error {
		if _, err := c.Call(ctx, capadapter.Request{Method: capadapter.MethodList}); err != nil {
			return errors.New("the list before the fault failed: " + describeErr(err))
		}
		_, err := c.Observe(ctx, "fault_probe")
		return err
	}
	listTwice := func(ctx context.Context, c *capclient.Client) error {
		if _, err := c.Call(ctx, capadapter.Request{Method: capadapter.MethodList}); err != nil {
			return errors.New("the first list failed: " + describeErr(err))
		}
		// The duplicate answer to the first list arrives with no request waiting (or is read
		// as the answer to this one, with the wrong id): either way the child is failed.
		_, err := c.Call(ctx, capadapter.Request{Method: capadapter.MethodList})
		if err == nil {
			return nil
		}
		if f := c.Failure(); f != nil {
			return f
		}
		return err
	}
	probes := []faultProbe{
		{FaultMalformed, capadapter.CodeMalformedResponse, list},
		{FaultOversized, capadapter.CodeTooLarge, list},
		{FaultDuplicate, capadapter.CodeMalformedResponse, listTwice},
		{FaultMissing, capadapter.CodeTimeout, listThenObserve},
		{FaultCrash, capadapter.CodeUnavailable, listThenObserve},
		{FaultHangList, capadapter.CodeTimeout, nil},
	}
	// The probes run at once, each with a child of its own, and are reported in order: two
	// of them (missing, hang-list) wait out faultTimeout, which one after the other made
	// every run of the validator last 4 s or more.
	out := make([]Probe, len(probes))
	var wg sync.WaitGroup
	for i, fp := range probes {
		wg.Go(func() { out[i] = runFaultProbe(ctx, fault, fp) })
	}
	wg.Wait()
	for _, p := range out {
		rep.add(p)
	}
}

func runFaultProbe(ctx context.Context, fault func(mode string) (string, []string), fp faultProbe) Probe {
	p := Probe{Name: "fault." + fp.mode}
	command, args := fault(fp.mode)
	c, err := capclient.Spawn(command, args, capclient.ClientOptions{CallTimeout: faultTimeout})
	if err != nil {
		p.Detail = "the fault adapter did not start: " + describeErr(err)
		return p
	}
	if onSpawn != nil {
		onSpawn(c)
	}
	defer func() {
		_ = c.Close(context.WithoutCancel(ctx))
		<-c.Done()
	}()
	if fp.run == nil {
		sctx, cancel := context.WithTimeout(ctx, faultTimeout)
		_, err = c.Handshake(sctx)
		cancel()
	} else {
		err = fp.run(ctx, c)
	}
	if err == nil {
		p.Detail = "the runtime accepted the faulty answer"
		return p
	}
	if got := capadapter.CodeOf(err); got != fp.want {
		p.Detail = "the runtime failed the call with " + describeErr(err) + ", want " + fp.want
		return p
	}
	if c.Failure() == nil {
		p.Detail = "the call failed with " + fp.want + " but the child was not failed"
		return p
	}
	timer := time.NewTimer(reapWait)
	defer timer.Stop()
	select {
	case <-c.Done():
	case <-timer.C:
		p.Detail = "the rejected child was not reaped within " + reapWait.String()
		return p
	}
	if err := syscall.Kill(-c.PID(), 0); !errors.Is(err, syscall.ESRCH) {
		p.Detail = "the rejected child's process group is still alive"
		return p
	}
	p.Pass = true
	p.Detail = "rejected with " + fp.want + "; child killed and reaped"
	return p
}
