//go:build linux

package fsops

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchQuery is a literal with a few hundred matching lines in the Go source tree.
const benchQuery = "ErrNotExist"

// benchTree returns a copy of $GOROOT/src (about 157 MB, 11,000 files), made once in the
// temporary directory and reused by later runs. A private copy keeps GOROOT's symbolic links
// and modes out of the comparison's way and pins the tree both tools see.
func benchTree(b *testing.B) string {
	dir := filepath.Join(os.TempDir(), "airlock-fsops-bench-goroot-src")
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir
	}
	os.RemoveAll(dir)
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skipf("go env GOROOT: %v", err)
	}
	src := filepath.Join(strings.TrimSpace(string(goroot)), "src")
	if out, err := exec.Command("cp", "-a", src, dir).CombinedOutput(); err != nil {
		b.Fatalf("copy %s: %v\n%s", src, err, out)
	}
	mustDo(b, os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644))
	return dir
}

// runCount runs a search command in dir, counts its output lines through a pipe (GNU grep
// stops at the first match when its output is /dev/null), and returns the best time of n runs.
func runCount(b *testing.B, dir string, n int, name string, args ...string) (time.Duration, int) {
	best, lines := time.Duration(1<<62), 0
	for range n {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
		out, err := cmd.StdoutPipe()
		mustDo(b, err)
		start := time.Now()
		mustDo(b, cmd.Start())
		c := 0
		sc := bufio.NewReaderSize(out, 1<<20)
		for {
			line, err := sc.ReadSlice('\n')
			if len(line) > 0 && line[len(line)-1] == '\n' {
				c++
			}
			if err == io.EOF {
				break
			}
			if err != nil && err != bufio.ErrBufferFull {
				b.Fatal(err)
			}
		}
		if err := cmd.Wait(); err != nil {
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() > 1 {
				b.Fatalf("%s: %v", name, err)
			}
		}
		best, lines = min(best, time.Since(start)), c
	}
	return best, lines
}

// BenchmarkSearch compares fs.search with `grep -rFn` (and `rg -F -n` when installed) over a
// copy of the Go source tree, with the same literal, and requires the same number of matching
// lines. Metrics: grep-ns and rg-ns (best of 3), x-grep and x-rg (our time over theirs; < 1
// is faster), matches.
//
//	go test -run '^$' -bench BenchmarkSearch -benchtime 10x ./internal/fsadapter/fsops/
func BenchmarkSearch(b *testing.B) {
	dir := benchTree(b)
	r, err := OpenOptions(dir, Options{MaxResponseBytes: 64 << 20})
	mustDo(b, err)
	defer r.Close()
	search := func() *SearchResult {
		res, perr := r.Search(bg, SearchPayload{Path: ".", Query: benchQuery, MaxResults: ptr(MaxSearchResults)})
		if perr != nil {
			b.Fatal(perr)
		}
		return res
	}
	res := search() // warm the page cache for every contestant
	if res.Truncated {
		b.Fatal("truncated")
	}
	// -I skips binary files, which in a UTF-8 locale means a NUL or an encoding error: the
	// files fs.search skips.
	grepNs, grepLines := runCount(b, dir, 3, "grep", "-rFnI", benchQuery, ".")
	if grepLines != len(res.Matches) {
		b.Fatalf("grep -rFnI found %d lines, fs.search %d", grepLines, len(res.Matches))
	}
	var rgNs time.Duration
	if _, err := exec.LookPath("rg"); err == nil {
		var rgLines int
		rgNs, rgLines = runCount(b, dir, 3, "rg", "-F", "-n", "--no-ignore", "--hidden", "--no-messages", benchQuery, ".")
		if rgLines != len(res.Matches) {
			b.Logf("rg found %d lines, fs.search %d (rg searches invalid UTF-8 files)", rgLines, len(res.Matches))
		}
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		search()
	}
	ours := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(len(res.Matches)), "matches")
	b.ReportMetric(float64(grepNs.Nanoseconds()), "grep-ns")
	b.ReportMetric(float64(ours)/float64(grepNs), "x-grep")
	if rgNs > 0 {
		b.ReportMetric(float64(rgNs.Nanoseconds()), "rg-ns")
		b.ReportMetric(float64(ours)/float64(rgNs), "x-rg")
	}
	b.Logf("tree %s: fs.search %v, grep -rFnI %v, rg -F %v, %d matching lines", dir, ours, grepNs, rgNs, len(res.Matches))
}

// BenchmarkRead4MiB measures fs.read of a 4 MiB text file.
func BenchmarkRead4MiB(b *testing.B) {
	dir := b.TempDir()
	content := bytes.Repeat([]byte(strings.Repeat("x", 63)+"\n"), 4<<20/64)
	mustDo(b, os.WriteFile(filepath.Join(dir, "f"), content, 0o644))
	r, err := OpenOptions(dir, Options{MaxResponseBytes: 5 << 20})
	mustDo(b, err)
	defer r.Close()
	b.SetBytes(int64(len(content)))
	for b.Loop() {
		res, perr := r.Read(bg, ReadPayload{Path: "f", MaxBytes: ptr(int64(MaxContentBytes))})
		if perr != nil || res.BytesRead != int64(len(content)) {
			b.Fatal(perr, fmt.Sprint(res.BytesRead))
		}
	}
}

// BenchmarkStat measures fs.stat of a file three directories deep.
func BenchmarkStat(b *testing.B) {
	dir := b.TempDir()
	makeTree(b, dir, "a/b/c/f=x")
	r, err := Open(dir)
	mustDo(b, err)
	defer r.Close()
	for b.Loop() {
		if _, perr := r.Stat(bg, StatPayload{Path: "a/b/c/f"}); perr != nil {
			b.Fatal(perr)
		}
	}
}
