// Command flooder is a test harness, built by daemontest.StartFlood: from one process it holds
// many connections to a Unix socket that never complete a line (idle), that send one byte
// per interval (slow), or that attach a session each and wait for its events (attach), as a
// looping or hostile agent harness would, and reports how the server closed them.
//
// It opens -conns connections, prints "ready" on stdout, and keeps them open: a connection the
// server closes is redialled while -redial is set. When stdin closes it stops redialling,
// waits up to -drain for the server to close every connection still open, closes the rest
// itself, and prints one JSON line: a Result (daemontest.FloodResult).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxLine bounds one line read from the server: error lines are well under 64 KiB.
const maxLine = 64 << 10

// result is what the flooder prints at the end; daemontest.FloodResult decodes it.
type result struct {
	Opened         int            `json:"opened"`         // connections that were established
	DialFailed     int            `json:"dialFailed"`     // dials the kernel or server refused
	ClosedByServer int            `json:"closedByServer"` // connections the server closed
	LeftOpen       int            `json:"leftOpen"`       // still open after the drain: closed by the flooder
	Codes          map[string]int `json:"codes"`          // error code, or event name, of the last line before close ("" for none)
	MaxOpen        int            `json:"maxOpen"`        // most connections open at once
}

type flooder struct {
	socket   string
	mode     string
	prefix   string
	interval time.Duration
	redial   bool
	sessions []string // attach: connection i attaches sessions[i%len(sessions)]
	gen      int64

	mu      sync.Mutex
	stopped bool
	open    map[net.Conn]struct{}
	res     result
	wg      sync.WaitGroup
}

func main() {
	f := &flooder{open: map[net.Conn]struct{}{}, res: result{Codes: map[string]int{}}}
	conns := flag.Int("conns", 100, "connections to hold")
	drain := flag.Duration("drain", 20*time.Second, "how long to wait for the server to close the connections after stdin closes")
	flag.StringVar(&f.socket, "socket", "", "Unix socket `path`")
	flag.StringVar(&f.mode, "mode", "idle", "idle: send nothing; slow: send one byte per -interval; attach: attach one of -sessions and read its events")
	flag.StringVar(&f.prefix, "prefix", "", "slow mode: a complete line that every second connection sends first")
	flag.DurationVar(&f.interval, "interval", time.Second, "slow mode: time between bytes")
	flag.BoolVar(&f.redial, "redial", true, "redial a connection the server closed")
	sessions := flag.String("sessions", "", "attach mode: comma-separated session ids; connection i attaches the (i mod n)th")
	flag.Int64Var(&f.gen, "generation", 1, "attach mode: the sessions' generation")
	flag.Parse()
	if *sessions != "" {
		f.sessions = strings.Split(*sessions, ",")
	}
	raiseNoFile()

	for i := range *conns {
		f.wg.Add(1)
		go f.hold(i)
	}
	// "ready" once every connection was dialled once: the flood is at full strength.
	for {
		f.mu.Lock()
		n := f.res.Opened + f.res.DialFailed
		f.mu.Unlock()
		if n >= *conns {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)

	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(*drain):
		f.mu.Lock()
		for nc := range f.open {
			nc.Close()
		}
		f.mu.Unlock()
		<-done
	}
	b, _ := json.Marshal(&f.res)
	fmt.Println(string(b))
}

// raiseNoFile lifts the soft descriptor limit to the hard one: 2,000 connections need it
// where the soft limit is 1,024.
func raiseNoFile() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// hold keeps connection i open until the flood stops.
func (f *flooder) hold(i int) {
	defer f.wg.Done()
	for {
		f.mu.Lock()
		stop := f.stopped
		f.mu.Unlock()
		if stop {
			return
		}
		nc, err := net.DialTimeout("unix", f.socket, 10*time.Second)
		f.mu.Lock()
		if err != nil {
			f.res.DialFailed++
			f.mu.Unlock()
			if !f.redial {
				return
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		f.res.Opened++
		f.open[nc] = struct{}{}
		f.res.MaxOpen = max(f.res.MaxOpen, len(f.open))
		f.mu.Unlock()

		code, byServer := f.serve(nc, i)

		f.mu.Lock()
		delete(f.open, nc)
		if byServer {
			f.res.ClosedByServer++
			f.res.Codes[code]++
		} else {
			f.res.LeftOpen++
		}
		stop = f.stopped || !f.redial
		f.mu.Unlock()
		nc.Close()
		if stop {
			return
		}
	}
}

// serve runs one connection until it ends. It returns the error code of the last line the
// server sent and whether the server closed the connection (rather than the flooder).
func (f *flooder) serve(nc net.Conn, i int) (code string, byServer bool) {
	withPrefix := i%2 == 1
	stopWrites := make(chan struct{})
	var writes sync.WaitGroup
	if f.mode == "attach" && len(f.sessions) > 0 {
		line := fmt.Sprintf(`{"protocolVersion":"2.0","requestId":"attach-%d","operation":"attach","sessionId":%q,"generation":%d,"payload":{}}`+"\n",
			i, f.sessions[i%len(f.sessions)], f.gen)
		// A failed write is a connection the server already closed: the reader sees why.
		_, _ = nc.Write([]byte(line))
	}
	if f.mode == "slow" {
		writes.Add(1)
		go func() {
			defer writes.Done()
			if withPrefix && f.prefix != "" {
				if _, err := nc.Write([]byte(f.prefix + "\n")); err != nil {
					return
				}
			}
			t := time.NewTicker(f.interval)
			defer t.Stop()
			const trickle = `{"protocolVersion":"1.0","requestId":"slow","operation":"handshake","payload":{}}`
			for i := 0; ; i++ {
				select {
				case <-stopWrites:
					return
				case <-t.C:
				}
				if _, err := nc.Write([]byte{trickle[i%len(trickle)]}); err != nil {
					return
				}
			}
		}()
	}
	br := bufio.NewReaderSize(nc, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if err == nil {
			code = lineCode(line)
			continue
		}
		close(stopWrites)
		writes.Wait()
		// A connection the flooder closed itself at the end of the drain reads net.ErrClosed.
		return code, !errors.Is(err, net.ErrClosed)
	}
}

// lineCode returns the error code of a response line, the event name of an event line, or "".
func lineCode(line []byte) string {
	var m struct {
		Kind  string `json:"kind"`
		Event string `json:"event"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	switch {
	case json.Unmarshal(line, &m) != nil:
		return ""
	case m.Kind == "event":
		return m.Event
	case m.Error == nil:
		return ""
	}
	return m.Error.Code
}
