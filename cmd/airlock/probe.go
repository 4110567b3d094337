package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/protocol"
)

// probeTimeout is probe's default bound on dialing plus up to two handshakes. A healthy daemon
// answers in milliseconds; 5 s tolerates a loaded machine and still fails a health check fast.
const probeTimeout = 5 * time.Second

// probeResult is the data of probe's --json envelope, on success and on failure.
type probeResult struct {
	Ready           bool   `json:"ready"`
	Phase           string `json:"phase"`
	HostInstanceID  string `json:"hostInstanceId"`
	ProtocolVersion string `json:"protocolVersion"`
	ExitCode        int    `json:"exitCode"`
}

// probeHost is the part of a handshake answer probe needs. Ready is a pointer so that an
// answer without it is a protocol failure rather than "not ready".
type probeHost struct {
	Host *struct {
		HostInstanceID string `json:"hostInstanceId"`
		Ready          *bool  `json:"ready"`
		Draining       bool   `json:"draining"`
		Recovery       struct {
			Phase string `json:"phase"`
		} `json:"recovery"`
	} `json:"host"`
}

// refusal is a well-formed error answer to a handshake.
type refusal struct{ err *protocol.Error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// probe checks whether the daemon is ready. It handshakes with 2.0 and falls back to 1.0 only
// when 2.0 is refused with an error answer (an older daemon answers incompatible_protocol). A
// retryable refusal, such as connection_capacity, is a busy daemon: not ready, no fallback.
func (a *app) probe(ctx context.Context, args []string) int {
	o, fs := a.newCommand("probe")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {ready, phase, hostInstanceId, protocolVersion, exitCode}")
	timeout := fs.Duration("timeout", probeTimeout, "bound on the whole probe")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *timeout <= 0 {
		return a.failUsage(o, usageErrorf("--timeout must be positive"))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	version := protocol.Version2
	host, err := a.handshake(ctx, version)
	var ref *refusal
	if errors.As(err, &ref) && !ref.err.Retryable {
		version = protocol.Version1
		host, err = a.handshake(ctx, version)
		if errors.As(err, &ref) && !ref.err.Retryable {
			err = &cliError{body: *ref.err, exit: exitProtocol}
		}
	}
	res := probeResult{}
	if err != nil {
		if errors.As(err, &ref) {
			err = &cliError{body: *ref.err, exit: exitNotReady}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = transportErrorf(exitUnavailable, "no answer from %s within %v", a.socket, *timeout)
		}
		res.ExitCode = classify(err).exit
		return o.failWith(err, res)
	}
	h := host.Host
	res = probeResult{
		Ready:           *h.Ready,
		Phase:           h.Recovery.Phase,
		HostInstanceID:  h.HostInstanceID,
		ProtocolVersion: version,
		ExitCode:        exitOK,
	}
	if !res.Ready {
		res.ExitCode = exitNotReady
	}
	if o.json {
		o.emit(envelope{Schema: cliSchema, Command: o.command, OK: true, Data: res}, res.ExitCode)
		return res.ExitCode
	}
	state := "ready"
	if !res.Ready {
		state = fmt.Sprintf("not ready draining=%t", h.Draining)
	}
	fmt.Fprintf(o.stdout, "%s hostInstanceId=%s phase=%s protocol=%s\n", state, orDash(res.HostInstanceID), orDash(res.Phase), version)
	return res.ExitCode
}

// handshake runs one handshake on its own connection. It returns a *refusal for an error
// answer, and a protocol error for anything that is not an answer to it.
func (a *app) handshake(ctx context.Context, version string) (*probeHost, error) {
	c, err := a.dial(ctx, version)
	if err != nil {
		return nil, err
	}
	type result struct {
		resp *client.Response
		err  error
	}
	answered := make(chan result, 1)
	var wg sync.WaitGroup
	defer func() {
		c.Close()
		wg.Wait()
	}()
	wg.Go(func() {
		r, err := c.Call(ctx, client.Command{Operation: protocol.OpHandshake})
		answered <- result{r, err}
	})

	// Until the answer, the daemon has no reason to send anything else: nothing is attached.
	// Another line is either the daemon refusing the connection itself (capacity), or a peer
	// that does not speak the protocol.
	events := c.Events()
	for {
		select {
		case line, ok := <-events:
			if !ok {
				events = nil // the connection ended; the call reports how
				continue
			}
			return nil, unsolicited(line)
		case r := <-answered:
			if r.err != nil {
				// A refusal the daemon sent before closing reached events, not the call.
				select {
				case <-c.Done():
				case <-ctx.Done():
					return nil, r.err
				}
				if line, ok := <-c.Events(); ok {
					return nil, unsolicited(line)
				}
				// The write of the handshake may have failed only because the reader had
				// already closed the connection over a line that is not the protocol.
				if err := c.Err(); errors.Is(err, client.ErrProtocol) {
					return nil, err
				}
				return nil, r.err
			}
			return checkHandshake(r.resp, version)
		}
	}
}

// unsolicited interprets a line that was not the answer to the handshake.
func unsolicited(line json.RawMessage) error {
	var r client.Response
	if json.Unmarshal(line, &r) == nil && r.Kind == protocol.KindResponse && !r.OK && r.Error != nil && r.Error.Code != "" {
		return &refusal{err: r.Error}
	}
	return protocolErrorf("the peer sent a line that is not an answer to the handshake")
}

// checkHandshake validates an answer: it must be a response echoing the version, either an
// error with a code or data with host.ready.
func checkHandshake(r *client.Response, version string) (*probeHost, error) {
	if r.Kind != protocol.KindResponse || r.ProtocolVersion != version {
		return nil, protocolErrorf("the answer to the handshake is not a protocol %s response", version)
	}
	if !r.OK {
		if r.Error == nil || r.Error.Code == "" {
			return nil, protocolErrorf("the handshake was refused without an error code")
		}
		return nil, &refusal{err: r.Error}
	}
	var h probeHost
	if err := json.Unmarshal(r.Data, &h); err != nil || h.Host == nil || h.Host.Ready == nil {
		return nil, protocolErrorf("the handshake answer has no host.ready")
	}
	return &h, nil
}
