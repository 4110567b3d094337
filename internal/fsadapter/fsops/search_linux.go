package fsops

import (
	"bytes"
	"context"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/protocol"
	"golang.org/x/sys/unix"
)

// searchChunk is the read size of fs.search: large reads amortize system calls, and most
// source files fit in one.
const searchChunk = 256 << 10

// binarySniffBytes is how much of a file is checked for NUL, the binary-file test grep uses.
const binarySniffBytes = 8 << 10

// Search implements fs.search: every line containing query, a literal byte string (never a
// pattern), in the regular files at or under path.
//
// Order is deterministic: by path in byte order, then by line. There is one match per line,
// at the first occurrence in it; line and column are 1-based, column counting Unicode code
// points; text is the line without its "\n", cut to 4096 bytes at a rune boundary (column
// always refers to the whole line). A query containing "\n" matches across lines and is
// reported on the line where it starts.
//
// The walk never follows a symbolic link and never opens devices, FIFOs or sockets; binary
// files (a NUL in the first 8 KiB, or any invalid UTF-8) and names no valid path can address
// are skipped, as are entries that vanish or turn into something else during the walk. Each
// file and directory is opened by its full path from the root descriptor with the confinement
// flags, so a directory moved out of the root mid-walk is not followed out. A file is read up
// to the size fstat reported when it was opened.
//
// truncated is true when maxResults (default 1000, at most 10000) or the response budget cut
// the matches, or when the walk bound (MaxSearchFiles files, MaxSearchDepth levels) left part of
// the tree unsearched.
func (r *Root) Search(ctx context.Context, p SearchPayload) (*SearchResult, *protocol.Error) {
	if perr := ValidatePath(p.Path); perr != nil {
		return nil, perr
	}
	if len(p.Query) < 1 || len(p.Query) > MaxQueryBytes {
		return nil, argError("query", "query must be 1 to %d bytes", MaxQueryBytes)
	}
	if !utf8.ValidString(p.Query) {
		return nil, protocol.Errorf(CodeNotUTF8, "query is not valid UTF-8").With(DetailField, "query")
	}
	max := DefaultSearchResults
	if p.MaxResults != nil {
		if *p.MaxResults < 1 || *p.MaxResults > MaxSearchResults {
			return nil, argError("maxResults", "maxResults must be 1 to %d", MaxSearchResults)
		}
		max = *p.MaxResults
	}
	if perr := r.enter(ctx); perr != nil {
		return nil, perr
	}
	defer r.life.RUnlock()
	fd, st, perr := r.lookup(p.Path)
	if perr != nil {
		return nil, perr
	}
	unix.Close(fd)
	kind, perr := fileKind(st.Mode, "path")
	if perr != nil {
		return nil, perr
	}
	s := &searcher{
		ctx:     ctx,
		rootfd:  r.fd,
		query:   []byte(p.Query),
		max:     max,
		budget:  r.opts.MaxResponseBytes - len(`{"matches":[],"truncated":false}`),
		files:   r.opts.MaxSearchFiles,
		depth:   r.opts.MaxSearchDepth,
		chunk:   r.chunk,
		workers: searchWorkers(),
		res:     &SearchResult{Matches: []SearchMatch{}},
	}
	s.run(p.Path, kind == TypeFile)
	if ctx.Err() != nil {
		return nil, errCanceled()
	}
	return s.res, nil
}

// searchWorkers is the number of files searched at once: opening and reading files is mostly
// system-call time, which overlaps well across CPUs; more than four rarely helps.
func searchWorkers() int { return min(runtime.GOMAXPROCS(0), 4) }

// searcher runs one fs.search as a pipeline: the walk (one goroutine) lists files in result
// order and hands them to workers that scan them concurrently; the caller's goroutine commits
// each file's matches in walk order, so the result is the same as a sequential search.
type searcher struct {
	ctx     context.Context
	rootfd  int
	query   []byte
	max     int // results
	budget  int // bytes left for matches; committer only
	files   int // files left to open; walker only
	depth   int // maximum depth
	chunk   int
	workers int
	res     *SearchResult // committer only, and the walker's Truncated before it ends

	stop      atomic.Bool  // a cap was reached or ctx ended: walkers and workers wind down
	committed atomic.Int64 // matches committed, so workers collect no more than can be used
	walkCut   bool         // the walk bounds left files unsearched; walker only
}

// fileJob is one file of the walk, scanned by a worker.
type fileJob struct {
	path    string
	done    chan struct{} // closed when matches is final
	matches []SearchMatch // text filled in; nil for binary or unreadable files
}

func (s *searcher) run(p string, single bool) {
	order := make(chan *fileJob, 256)
	work := make(chan *fileJob, 256)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(order)
		defer close(work)
		emit := func(path string) bool {
			if s.stop.Load() {
				return false
			}
			if s.files == 0 {
				s.walkCut = true
				return false
			}
			s.files--
			j := &fileJob{path: path, done: make(chan struct{})}
			order <- j
			work <- j
			return true
		}
		if single {
			emit(p)
			return
		}
		s.walk(p, 0, make([]byte, direntBufSize), emit)
	})
	for range s.workers {
		wg.Go(func() {
			sc := &scanner{query: s.query, buf: make([]byte, s.chunk+len(s.query)+utf8.UTFMax)}
			for j := range work {
				if !s.stop.Load() {
					j.matches = sc.file(s, j.path)
				}
				close(j.done)
			}
		})
	}
	for j := range order {
		<-j.done
		if !s.stop.Load() {
			s.commit(j)
		}
	}
	wg.Wait()
	if s.walkCut {
		s.res.Truncated = true
	}
}

type walkEntry struct {
	name string
	dir  bool
}

// less orders entries so that a depth-first walk visits full paths in byte order: a directory
// sorts as its name followed by "/".
func (a walkEntry) less(b walkEntry) bool {
	n := min(len(a.name), len(b.name))
	if a.name[:n] != b.name[:n] {
		return a.name[:n] < b.name[:n]
	}
	return keyAt(a, n) < keyAt(b, n)
}

// keyAt is the byte of e's sort key at index i (-1 past its end).
func keyAt(e walkEntry, i int) int {
	switch {
	case i < len(e.name):
		return int(e.name[i])
	case i == len(e.name) && e.dir:
		return '/'
	}
	return -1
}

// walk lists dir and emits its files in order, descending into subdirectories; it reports
// false once emit refused a file or the search stopped.
func (s *searcher) walk(dir string, depth int, dirbuf []byte, emit func(string) bool) bool {
	if s.stop.Load() {
		return false
	}
	if s.ctx.Err() != nil {
		s.stop.Store(true)
		return false
	}
	fd, err := openAt(s.rootfd, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return true // vanished, replaced by a link, or unreadable: skipped
	}
	ents, err := readDirents(fd, dirbuf, nil)
	var list []walkEntry
	if err == nil {
		list = make([]walkEntry, 0, len(ents))
		for _, e := range ents {
			typ := e.typ
			if typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
					continue
				}
				switch st.Mode & unix.S_IFMT {
				case unix.S_IFREG:
					typ = unix.DT_REG
				case unix.S_IFDIR:
					typ = unix.DT_DIR
				}
			}
			if (typ == unix.DT_REG || typ == unix.DT_DIR) && validName(e.name) {
				list = append(list, walkEntry{name: e.name, dir: typ == unix.DT_DIR})
			}
		}
	}
	unix.Close(fd)
	sort.Slice(list, func(i, j int) bool { return list[i].less(list[j]) })
	for _, e := range list {
		p := joinPath(dir, e.name)
		if e.dir {
			if depth+1 > s.depth {
				s.walkCut = true
				continue
			}
			if !s.walk(p, depth+1, dirbuf, emit) {
				return false
			}
		} else if !emit(p) {
			return false
		}
	}
	return true
}

// scanner is one worker's state.
type scanner struct {
	query   []byte
	buf     []byte
	pending []pendingMatch
}

type pendingMatch struct {
	line, column int64
	lineStart    int64 // file offset
	text         []byte
	haveText     bool
}

// file searches one regular file and returns its matches, or nil if it is not a searchable
// text file.
func (sc *scanner) file(s *searcher, p string) []SearchMatch {
	if s.ctx.Err() != nil {
		s.stop.Store(true)
		return nil
	}
	fd, err := openAt(s.rootfd, p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	sc.pending = sc.pending[:0]
	want := s.max - int(s.committed.Load()) + 1
	if !sc.scan(fd, st.Size, max(want, 1)) || len(sc.pending) == 0 {
		return nil
	}
	out := make([]SearchMatch, len(sc.pending))
	for i := range sc.pending {
		pm := &sc.pending[i]
		if !pm.haveText {
			pm.text = lineText(fd, pm.lineStart)
		}
		out[i] = SearchMatch{Path: p, Line: pm.line, Column: pm.column, Text: matchText(pm.text)}
	}
	return out
}

// scan finds the matching lines of the file open on fd into sc.pending, at most want of them.
// It reports false if the file is binary or unreadable.
func (sc *scanner) scan(fd int, size int64, want int) bool {
	q, buf := sc.query, sc.buf
	var (
		base, searchFrom, validTo int64 // file offsets: buf[0], next search, end of validated bytes
		countedTo, lineStart      int64 // newlines are counted up to countedTo; its line starts at lineStart
		line                      int64 = 1
		runesBefore               int64 // code points in [lineStart, base) when lineStart < base
		n                         int
		eof, skipLine             bool
		sniffTo                   int64 // file offset up to which NUL was looked for
	)
	advance := func(to int64) {
		seg := buf[countedTo-base : to-base]
		if c := bytes.Count(seg, []byte{'\n'}); c > 0 {
			line += int64(c)
			lineStart = countedTo + int64(bytes.LastIndexByte(seg, '\n')) + 1
		}
		countedTo = to
	}
	for {
		for n < len(buf) && !eof {
			k, err := unix.Read(fd, buf[n:])
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return false
			}
			if k == 0 {
				eof = true
				break
			}
			n += k
			if base+int64(n) >= size {
				eof = true
			}
		}
		if sniffTo < binarySniffBytes {
			end := min(base+int64(n), binarySniffBytes)
			if bytes.IndexByte(buf[sniffTo-base:end-base], 0) >= 0 {
				return false
			}
			sniffTo = end
		}
		end := n
		if !eof {
			end -= incompleteTail(buf[:n])
		}
		if !utf8.Valid(buf[validTo-base : end]) {
			return false
		}
		validTo = base + int64(end)

		if skipLine {
			if i := bytes.IndexByte(buf[searchFrom-base:n], '\n'); i >= 0 {
				searchFrom += int64(i) + 1
				skipLine = false
			} else {
				searchFrom = base + int64(n)
			}
		}
		for !skipLine && len(sc.pending) < want {
			i := bytes.Index(buf[searchFrom-base:n], q)
			if i < 0 {
				searchFrom = max(searchFrom, base+int64(n-len(q)+1))
				break
			}
			at := searchFrom + int64(i)
			advance(at)
			var col int64
			if lineStart >= base {
				col = int64(utf8.RuneCount(buf[lineStart-base:at-base])) + 1
			} else {
				col = runesBefore + int64(utf8.RuneCount(buf[:at-base])) + 1
			}
			pm := pendingMatch{line: line, column: col, lineStart: lineStart}
			if lineStart >= base {
				ls := int(lineStart - base)
				lim := min(n, ls+MaxMatchTextBytes)
				if e := bytes.IndexByte(buf[ls:lim], '\n'); e >= 0 {
					pm.text, pm.haveText = buf[ls:ls+e], true
				} else if lim-ls == MaxMatchTextBytes || eof {
					pm.text, pm.haveText = buf[ls:lim], true
				}
				if pm.haveText {
					pm.text = append([]byte(nil), pm.text...)
				}
			}
			sc.pending = append(sc.pending, pm)
			if e := bytes.IndexByte(buf[at-base:n], '\n'); e >= 0 {
				searchFrom = at + int64(e) + 1
			} else {
				searchFrom, skipLine = base+int64(n), true
			}
		}
		if eof {
			return true
		}
		if len(sc.pending) >= want {
			// Enough matches: the rest of the file is only validated.
			searchFrom, skipLine = base+int64(n), false
		}
		// Keep what the next round still needs: a possible match straddling the end, and
		// bytes not yet validated; from a rune boundary, so that code points are counted whole.
		// The end of the data is a boundary: with a one-byte query, everything searched and
		// validated, nothing is kept (and buf[n] is past the buffer when the read filled it).
		keep := min(searchFrom, validTo, base+int64(n-len(q)+1))
		keep = max(keep, base)
		for keep > base && keep < base+int64(n) && !utf8.RuneStart(buf[keep-base]) {
			keep--
		}
		if keep > countedTo {
			advance(keep)
		}
		if lineStart < keep {
			from := max(lineStart, base)
			if lineStart >= base {
				runesBefore = 0
			}
			runesBefore += int64(utf8.RuneCount(buf[from-base : keep-base]))
		}
		k := int(keep - base)
		copy(buf, buf[k:n])
		n -= k
		base = keep
		if countedTo < base {
			countedTo = base
		}
	}
}

// incompleteTail returns the length of an incomplete UTF-8 sequence at the end of b (0 to 3).
func incompleteTail(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return len(b) - i
			}
			return 0
		}
	}
	return 0
}

// commit moves one file's matches into the result, within the caps.
func (s *searcher) commit(j *fileJob) {
	if len(j.matches) == 0 {
		return
	}
	pathCost := jsonStringCost(j.path)
	for _, m := range j.matches {
		if len(s.res.Matches) == s.max {
			s.res.Truncated = true
			s.stop.Store(true)
			return
		}
		cost := len(`{"path":,"line":,"column":,"text":}`) + pathCost + intCost(m.Line) + intCost(m.Column) + jsonStringCost(m.Text)
		if len(s.res.Matches) > 0 {
			cost++
		}
		if cost > s.budget {
			s.res.Truncated = true
			s.stop.Store(true)
			return
		}
		s.budget -= cost
		s.res.Matches = append(s.res.Matches, m)
		s.committed.Add(1)
	}
}

// lineText reads the start of the line at off, for a match whose line began before the
// buffered window.
func lineText(fd int, off int64) []byte {
	b := make([]byte, MaxMatchTextBytes)
	n, _ := preadFull(fd, b, off)
	b = b[:n]
	if e := bytes.IndexByte(b, '\n'); e >= 0 {
		b = b[:e]
	}
	return b
}

// matchText cuts a line to MaxMatchTextBytes at a rune boundary and to its longest valid UTF-8
// prefix (the file may have changed since it was validated).
func matchText(b []byte) string {
	if len(b) > MaxMatchTextBytes {
		b = b[:MaxMatchTextBytes]
	}
	b = b[:len(b)-incompleteTail(b)]
	if !utf8.Valid(b) {
		i := 0
		for i < len(b) {
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			i += size
		}
		b = b[:i]
	}
	return string(b)
}
