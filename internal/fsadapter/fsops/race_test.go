//go:build linux

package fsops

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// raceDuration bounds TestSwapRace; long enough for tens of thousands of swaps on two cores.
const raceDuration = 2 * time.Second

// TestSwapRace swaps a directory of the root with a symbolic link to an outside directory in a
// loop (an atomic RENAME_EXCHANGE, and the non-atomic rename dance) while every operation runs
// against paths beneath it: no result ever carries the outside content and nothing is created
// outside.
func TestSwapRace(t *testing.T) {
	base := t.TempDir()
	secret := "OUTSIDE-SECRET-race"
	makeTree(t, base, "root/d/secret.txt=inside "+strings.Repeat("x", 100), "outside/secret.txt="+secret,
		"root/link -> "+filepath.Join(base, "outside"))
	root := filepath.Join(base, "root")
	r := openRoot(t, root)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var swaps, reads, escapes atomic.Int64
	wg.Go(func() {
		d, link, aside := filepath.Join(root, "d"), filepath.Join(root, "link"), filepath.Join(root, "aside")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
				unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE)
			} else {
				os.Rename(d, aside) // the directory steps aside
				os.Rename(link, d)  // the link takes its name
				os.Rename(d, link)  // and gives it back
				os.Rename(aside, d)
			}
			swaps.Add(1)
		}
	})
	check := func(v any) {
		reads.Add(1)
		if b, _ := json.Marshal(v); strings.Contains(string(b), secret) {
			escapes.Add(1)
		}
	}
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if res, perr := r.Read(bg, ReadPayload{Path: "d/secret.txt"}); perr == nil {
					check(res)
				}
				if res, perr := r.Stat(bg, StatPayload{Path: "d/secret.txt"}); perr == nil && res.Size == int64(len(secret)) {
					escapes.Add(1)
				}
				if res, perr := r.List(bg, ListPayload{Path: "d"}); perr == nil {
					check(res)
				}
				if res, perr := r.Search(bg, SearchPayload{Path: "d", Query: "SECRET"}); perr == nil {
					check(res)
				}
				if res, perr := r.Search(bg, SearchPayload{Path: ".", Query: "SECRET"}); perr == nil {
					check(res)
				}
				if w == 0 && i%8 == 0 {
					r.Write(bg, WritePayload{Path: "d/new.txt", Content: "x", Overwrite: ptr(true)})
					r.Edit(bg, EditPayload{Path: "d/secret.txt", Edits: []Edit{{OldText: "SECRET", NewText: "pwned"}}})
				}
			}
		})
	}
	time.Sleep(raceDuration)
	close(stop)
	wg.Wait()
	t.Logf("%d swaps, %d successful reads", swaps.Load(), reads.Load())
	if escapes.Load() != 0 {
		t.Fatalf("%d reads returned outside content", escapes.Load())
	}
	if reads.Load() == 0 || swaps.Load() == 0 {
		t.Fatal("the race did not run")
	}
	if got := readFile(t, filepath.Join(base, "outside/secret.txt")); got != secret {
		t.Fatal("outside file modified")
	}
	if ents, _ := os.ReadDir(filepath.Join(base, "outside")); len(ents) != 1 {
		t.Fatalf("files created outside: %v", ents)
	}
}
