package trywrite

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWritesWhatFitsWithoutWaiting: a write takes everything while the peer has room, only
// part of a frame when it has not (without waiting), nothing when it is full, and fails once
// the descriptor is closed.
func TestWritesWhatFitsWithoutWaiting(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	uc := c.(*net.UnixConn)
	_ = uc.SetWriteBuffer(4096)
	w, err := New(uc)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Write([]byte("hello\n")); n != 6 || err != nil {
		t.Fatalf("small write: %d %v", n, err)
	}
	got := make([]byte, 6)
	if _, err := io.ReadFull(peer, got); err != nil || string(got) != "hello\n" {
		t.Fatalf("peer read %q %v", got, err)
	}
	big := bytes.Repeat([]byte("x"), 16<<20)
	n, err := w.Write(big)
	if err != nil || n == 0 || n >= len(big) {
		t.Fatalf("write into a peer that does not read: %d of %d, %v", n, len(big), err)
	}
	if m, err := w.Write(big); m != 0 || err != nil {
		t.Fatalf("write into a full socket: %d %v", m, err)
	}
	c.Close()
	if _, err := w.Write([]byte("late")); err == nil {
		t.Fatal("a write after close succeeded")
	}
}

// TestPipe: a Writer works on a pipe too, and reports the broken pipe once the reader is gone.
func TestPipe(t *testing.T) {
	r, wf, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	var zero Writer
	if zero.Ready() {
		t.Fatal("the zero Writer is ready")
	}
	w, err := New(wf)
	if err != nil || !w.Ready() {
		t.Fatal(err)
	}
	if n, err := w.Write([]byte("line\n")); n != 5 || err != nil {
		t.Fatalf("pipe write: %d %v", n, err)
	}
	r.Close()
	if _, err := w.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a pipe without reader: %v", err)
	}
}
