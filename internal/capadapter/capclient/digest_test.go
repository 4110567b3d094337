package capclient

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A FIFO where an adapter's executable was (which the adapter, running as the daemon's user,
// can put there before it exits and is restarted) is refused at once, not waited on.
func TestFileDigestsRefusesAFIFO(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "adapter")
	if err := syscall.Mkfifo(exe, 0o700); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := fileDigests(Registration{Name: "x", Command: exe})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("fileDigests hashed a FIFO")
		}
	case <-time.After(10 * time.Second):
		// Let the blocked open return, so that the goroutine ends.
		if w, err := os.OpenFile(exe, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("fileDigests blocked on a FIFO")
	}
}
