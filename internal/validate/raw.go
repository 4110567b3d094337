package validate

// This file owns the one exchange the harness makes outside the runtime's client: a child
// started as the runtime starts it, whose answers are read as bytes, so that the harness can
// describe an answer the client can only refuse.

import (
	"os/exec"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
)

// rawExchange starts a fresh child of the adapter under test as the runtime does (no shell,
// the runtime's environment with Config.PassEnv, a process group of its own), writes frames
// one at a time and reads one answer frame (at most capadapter.MaxFrameBytes) for each, within
// the call timeout. It stops at the first frame without an answer, then kills the child's
// group and reaps it, and waits for its reader, before it returns the answers read, in order.
func (h *harness) rawExchange(frames [][]byte) [][]byte {
	cmd := &exec.Cmd{
		Path:        h.cfg.Command,
		Args:        append([]string{h.cfg.Command}, h.cfg.Args...),
		Env:         capclient.Environ(h.cfg.PassEnv),
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	stdin, err1 := cmd.StdinPipe()
	stdout, err2 := cmd.StdoutPipe()
	if err1 != nil || err2 != nil || cmd.Start() != nil {
		return nil
	}
	lines := make(chan []byte)
	stop := make(chan struct{})
	readDone := make(chan struct{})
	go func() { // ends when stdout does (cmd.Wait closes it) or stop closes
		defer close(readDone)
		fr := capadapter.NewFrameReader(stdout)
		for {
			line, err := fr.Next()
			if err != nil {
				return
			}
			select {
			case lines <- append([]byte(nil), line...):
			case <-stop:
				return
			}
		}
	}()
	var answers [][]byte
	timer := time.NewTimer(h.cfg.Timeout)
	defer timer.Stop()
exchange:
	for _, f := range frames {
		if _, err := stdin.Write(f); err != nil {
			break
		}
		timer.Reset(h.cfg.Timeout)
		select {
		case l := <-lines:
			answers = append(answers, l)
		case <-timer.C:
			break exchange
		case <-readDone:
			break exchange
		case <-h.ctx.Done():
			break exchange
		}
	}
	close(stop)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = stdin.Close()
	_ = cmd.Wait() // reaps the child and closes stdout, which ends the reader
	<-readDone
	return answers
}
