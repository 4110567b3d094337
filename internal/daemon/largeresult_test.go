package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// TestLargeToolResultsArriveIntact sends several fs.read calls with results of hundreds of KiB
// and reads nothing until all of them are answered, so that each answer is written in part
// directly and in part by the writer goroutine, from pooled buffers, while the adapter
// connection's reader reuses its own buffer for the next result. Every answer must carry
// exactly its own content.
func TestLargeToolResultsArriveIntact(t *testing.T) {
	root := daemontest.ShortDir(t)
	cwd := filepath.Join(root, "cwd")
	sizes := []int{200 << 10, 700 << 10, 90 << 10, 600 << 10}
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		if err := os.WriteFile(filepath.Join(cwd, fmt.Sprintf("f%d-%d", i, n)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(root, "fs.sock")
	startReadAdapter(t, sock)

	d, err := Start(Config{SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(t.Context())
	for deadline := time.Now().Add(10 * time.Second); !d.sessions.Ready(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("daemon not ready")
		}
	}
	openToolSessionWith(t, d, sock, cwd, "fs.read")

	nc, err := net.Dial("unix", d.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	for round := range 3 {
		for i, n := range sizes {
			line := fmt.Sprintf(`{"protocolVersion":"2.0","requestId":"r%d-%d","operation":"invokeTool","sessionId":"bench","generation":1,`+
				`"payload":{"toolCallId":"c%d-%d","operation":"fs.read","arguments":{"path":"f%d-%d"}}}`+"\n", round, i, round, i, i, n)
			if _, err := nc.Write([]byte(line)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond) // let the answers pile up in the socket and the queue
		br := bufio.NewReaderSize(nc, 1<<20)
		got := map[string]string{}
		for range sizes {
			line, err := br.ReadBytes('\n')
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				RequestID string `json:"requestId"`
				OK        bool   `json:"ok"`
				Data      struct {
					Data struct {
						Content string `json:"content"`
					} `json:"data"`
				} `json:"data"`
			}
			if err := json.Unmarshal(line, &r); err != nil || !r.OK {
				t.Fatalf("answer %.200s: %v", line, err)
			}
			got[r.RequestID] = r.Data.Data.Content
		}
		if br.Buffered() != 0 {
			t.Fatalf("%d bytes after the answers", br.Buffered())
		}
		for i, n := range sizes {
			if c, want := got[fmt.Sprintf("r%d-%d", round, i)], readContent(fmt.Sprintf("f%d-%d", i, n)); c != want {
				t.Fatalf("round %d call %d: content of %d bytes, want %d", round, i, len(c), len(want))
			}
		}
	}
}

// readContent is what startReadAdapter reads from path "fI-N": N bytes, lines of the letter
// 'a'+I.
func readContent(path string) string {
	i, n, _ := strings.Cut(strings.TrimPrefix(path, "f"), "-")
	k, _ := strconv.Atoi(i)
	size, _ := strconv.Atoi(n)
	line := strings.Repeat(string(rune('a'+k)), 63) + "\n"
	return strings.Repeat(line, size/64+1)[:size]
}

// startReadAdapter serves an adapter that binds and answers every fs.read with readContent of
// its path, at once.
func startReadAdapter(t *testing.T, socket string) {
	startScriptedAdapter(t, socket, func(c net.Conn, wmu *sync.Mutex, f map[string]any, _ []byte) {
		if f["kind"] != "invoke" {
			return
		}
		path, _ := f["payload"].(map[string]any)["path"].(string)
		content := readContent(path)
		delete(f, "payload")
		f["kind"], f["ok"] = "result", true
		f["data"] = map[string]any{"content": content, "bytesRead": len(content), "eof": true}
		reply(c, wmu, f)
	})
}
