package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// rawWait is raw's default bound on waiting for the answers still due once stdin has ended.
// The daemon answers the operations of this host in milliseconds; a drain may take longer,
// and --wait raises the bound for it.
const rawWait = 10 * time.Second

// invalidPrefix starts the requestId the daemon gives the answer to a line whose own
// requestId it could not read.
const invalidPrefix = "invalid-"

// raw sends the command lines of stdin to the daemon unchanged and prints every line the daemon
// sends, responses and events, unchanged. Once stdin ends it waits, at most --wait, until every
// line sent has been answered.
func (a *app) raw(ctx context.Context, args []string) int {
	o, fs := a.newCommand("raw")
	wait := fs.Duration("wait", rawWait, "how long to wait for outstanding answers once stdin has ended")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *wait < 0 {
		return a.failUsage(o, usageErrorf("--wait must not be negative"))
	}
	// The daemon closes a connection whose first line does not come within its
	// first-line timeout (5 s): a person typing at a terminal is not that quick, so raw
	// dials only once stdin has something to send (or has ended). A terminal hands over a
	// whole line at a time.
	stdin := bufio.NewReader(a.stdin)
	if err := waitInput(ctx, stdin); err != nil {
		return o.fail(err)
	}
	dctx, cancel := context.WithTimeout(ctx, callTimeout)
	c, err := client.DialRaw(dctx, a.socket)
	cancel()
	if err != nil {
		return o.fail(unreachable(a.socket, err))
	}
	t := newAnswers()
	printed := make(chan struct{}) // closed once the daemon's last line is printed
	var werr error                 // stdout's first write error, set before printed closes
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(printed)
		for line := range c.Events() {
			// After a write error the lines are still drained, so that the connection's
			// reader never blocks.
			if werr == nil {
				_, werr = o.stdout.Write(append(line, '\n'))
			}
			t.answered(line)
		}
	})
	err = exchangeRaw(ctx, stdin, c, t, printed, *wait)
	c.Close()
	wg.Wait()
	switch {
	case err != nil:
		return o.fail(err)
	case werr != nil:
		return o.fail(transportErrorf(exitFailure, "cannot write to stdout: %v", werr))
	}
	return exitOK
}

// waitInput returns once r has a byte to read or has ended, or with ctx's error. Like stdin's
// reader in exchangeRaw, the goroutine that waits has no owner: it ends with stdin, or with
// the process.
func waitInput(ctx context.Context, r *bufio.Reader) error {
	ready := make(chan struct{})
	go func() {
		_, _ = r.Peek(1) // an error shows again at the first read
		close(ready)
	}()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// exchangeRaw sends stdin to the daemon and waits, at most wait once stdin has ended, until
// every line sent is answered. printed is closed when the daemon has closed the connection
// and its last line is printed.
func exchangeRaw(ctx context.Context, stdin io.Reader, c *client.Client, t *answers, printed <-chan struct{}, wait time.Duration) error {
	// Reading stdin has no deadline: a terminal may never send EOF. This goroutine therefore
	// has no owner that waits for it; it ends with stdin, or with the process.
	input := make(chan error, 1)
	go func() { input <- send(stdin, c, t) }()

	var inputErr error
	select {
	case inputErr = <-input:
	case <-printed:
		// The daemon is gone. Whether stdin had more to send shows once it ends or its next
		// line fails to go out; wait bounds that as it bounds the answers.
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case inputErr = <-input:
		case <-timer.C:
			return transportErrorf(exitFailure, "the daemon closed the connection before stdin ended")
		case <-ctx.Done():
			return ctx.Err()
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	if inputErr != nil && !isUsage(inputErr) {
		// A line could not go out: the daemon is closing the connection. What it sent before
		// is still in flight to the reader and is printed first.
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-printed:
		case <-timer.C:
		case <-ctx.Done():
		}
		return transportErrorf(exitFailure, "the daemon closed the connection before stdin ended: %v", inputErr)
	}
	t.endInput()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-t.settled:
	case <-printed:
		if n := t.outstanding(); n > 0 {
			return transportErrorf(exitFailure, "the daemon closed the connection with %d lines unanswered", n)
		}
	case <-timer.C:
		return transportErrorf(exitFailure, "%d lines unanswered after %v", t.outstanding(), wait)
	case <-ctx.Done():
		return ctx.Err()
	}
	// A bad stdin line ends the input, but what was sent before it is answered first.
	return inputErr
}

func isUsage(err error) bool {
	var ce *cliError
	return errors.As(err, &ce) && ce.body.Code == codeUsage
}

// send writes each line of r to the daemon, recording it in t first so that a fast answer is
// never taken for an unexpected one. A stdin line over client.MaxLineBytes is a usage error.
func send(r io.Reader, c *client.Client, t *answers) error {
	lines := ndjson.NewReader(&lineEnder{r: r}, client.MaxLineBytes)
	for {
		line, err := lines.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return usageErrorf("stdin: %v", err)
		}
		t.sent(line)
		// line is only valid until the next call; the full slice expression makes append copy.
		if err := c.WriteLine(append(line[:len(line):len(line)], '\n')); err != nil {
			return err
		}
	}
}

// lineEnder supplies the LF a last line without one lacks, so that a script's final command is
// not lost to io.ErrUnexpectedEOF.
type lineEnder struct {
	r    io.Reader
	seen bool // a byte has been read
	last byte
	done bool
}

func (l *lineEnder) Read(p []byte) (int, error) {
	if l.done {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := l.r.Read(p)
	if n > 0 {
		l.seen, l.last = true, p[n-1]
		if errors.Is(err, io.EOF) {
			err = nil // the next call reports it
		}
		return n, err
	}
	if errors.Is(err, io.EOF) {
		l.done = true
		if l.seen && l.last != '\n' {
			p[0] = '\n'
			return 1, nil
		}
	}
	return 0, err
}

// answers counts the lines sent that still wait for an answer. Lines without a usable requestId
// are answered under an id the daemon makes up; each answer under such an id settles one.
type answers struct {
	settled chan struct{} // closed once input ended and nothing is outstanding

	// mu guards the fields below.
	mu      sync.Mutex
	pending map[string]int // request id → lines sent with it, not yet answered
	invalid int            // lines sent without a usable request id, not yet answered
	ended   bool           // no more lines will be sent
	closed  bool           // settled is closed
}

func newAnswers() *answers {
	return &answers{settled: make(chan struct{}), pending: make(map[string]int)}
}

func (t *answers) sent(line []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := requestID(line); ok {
		t.pending[id]++
	} else {
		t.invalid++
	}
}

// answered settles the line a response answers; events and unknown ids settle nothing.
func (t *answers) answered(line []byte) {
	var head struct {
		Kind      string `json:"kind"`
		RequestID string `json:"requestId"`
	}
	if json.Unmarshal(line, &head) != nil || head.Kind != protocol.KindResponse {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.pending[head.RequestID] > 0:
		if t.pending[head.RequestID]--; t.pending[head.RequestID] == 0 {
			delete(t.pending, head.RequestID)
		}
	case strings.HasPrefix(head.RequestID, invalidPrefix) && t.invalid > 0:
		t.invalid--
	}
	t.settleLocked()
}

func (t *answers) endInput() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended = true
	t.settleLocked()
}

func (t *answers) outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.outstandingLocked()
}

func (t *answers) outstandingLocked() int {
	n := t.invalid
	for _, k := range t.pending {
		n += k
	}
	return n
}

func (t *answers) settleLocked() {
	if t.ended && !t.closed && t.outstandingLocked() == 0 {
		t.closed = true
		close(t.settled)
	}
}

// requestID returns the requestId of a command line when the daemon can echo it: a string of
// 1 to protocol.MaxRequestIDLen code points without control characters. The daemon reads the
// id it echoes from a malformed line just as leniently as json.Unmarshal does here.
func requestID(line []byte) (string, bool) {
	var head struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(line, &head) != nil || len(head.RequestID) == 0 || head.RequestID[0] != '"' {
		return "", false
	}
	var id string
	if json.Unmarshal(head.RequestID, &id) != nil || id == "" || !utf8.ValidString(id) ||
		utf8.RuneCountInString(id) > protocol.MaxRequestIDLen || strings.IndexFunc(id, unicode.IsControl) >= 0 {
		return "", false
	}
	return id, true
}
