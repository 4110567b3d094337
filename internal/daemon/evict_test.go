package daemon

import (
	"bufio"
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
)

// TestEvictionNoticeRacesALine evicts an idle connection just as it sends a command, 200
// times: with a per-process share of one connection, a second connection evicts the first
// while the first writes a status line. Whenever the second connection is admitted, the first
// must receive connection_evicted before it closes, whichever of its reader and the eviction
// comes first: the notice is what tells a client that its unanswered commands did not run
// and that it may reconnect and send them again (internal/client does). Without the notice,
// the reader that saw the eviction first closed the connection silently.
func TestEvictionNoticeRacesALine(t *testing.T) {
	limits := DefaultLimits
	limits.MaxConnectionsPerPeer = 1
	d := startInProcess(t, Config{Limits: limits})
	status := []byte(`{"protocolVersion":"2.0","requestId":"s","operation":"status","payload":{}}` + "\n")
	dial := func() (net.Conn, *bufio.Reader) {
		nc, err := net.Dial("unix", d.cfg.SocketPath)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		return nc, bufio.NewReaderSize(nc, 1<<20)
	}
	evictions := 0
	for i := range 200 {
		// The last round's connections must be gone on the daemon's side too, or the new
		// first connection may find the share held by one of them.
		for deadline := time.Now().Add(10 * time.Second); d.srv.connections() > 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the daemon still holds the last round's connections")
			}
		}
		first, fr := dial()
		if _, err := first.Write(status); err != nil {
			t.Fatal(err)
		}
		if _, err := fr.ReadSlice('\n'); err != nil { // its answer: the connection is idle again
			t.Fatal(err)
		}
		second, sr := dial()
		first.Write(status) // may fail: the eviction may have closed the connection already
		second.Write(status)
		answer, err := sr.ReadSlice('\n')
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(answer, []byte(protocol.CodeConnectionCapacity)) {
			// The first connection's status was in flight: it was busy, not evicted.
			first.Close()
			second.Close()
			continue
		}
		evictions++
		var got [][]byte
		for {
			line, err := fr.ReadBytes('\n')
			if err != nil {
				break
			}
			got = append(got, line)
		}
		if len(got) == 0 || !bytes.Contains(got[len(got)-1], []byte(`"code":"`+protocol.CodeConnectionEvicted+`"`)) {
			t.Fatalf("round %d: the evicted connection closed after %q, without connection_evicted", i, got)
		}
		first.Close()
		second.Close()
	}
	if evictions == 0 {
		t.Fatal("no connection was evicted")
	}
}
