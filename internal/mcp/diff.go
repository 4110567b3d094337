package mcp

import (
	"strconv"
	"strings"
)

// unifiedDiff returns the unified diff (diff -u's format, three lines of context, "a/" and
// "b/" before the path as git writes them) that turns before into after, or "" when they are
// equal. Lines end at LF; a last line without one is marked "\ No newline at end of file".
//
// The edit script is Myers's shortest one over the lines between the common first and last
// lines, unless it needs more than maxDiffEdits insertions and deletions: then the lines
// between are one replacement (a correct diff, not the shortest), which bounds the work at
// O((N+M)·maxDiffEdits) time and O(maxDiffEdits²) memory.
//
// Hunks are whole: when the diff would pass limit bytes, the hunks that fit are returned and
// truncated is true.
func unifiedDiff(name, before, after string, limit int) (diff string, truncated bool) {
	if before == after {
		return "", false
	}
	a, b := splitLines(before), splitLines(after)
	ops := diffLines(a, b)
	var sb strings.Builder
	sb.WriteString("--- a/" + name + "\n+++ b/" + name + "\n")
	for _, h := range hunks(ops, diffContext) {
		text := h.render(ops, a, b)
		if sb.Len()+len(text) > limit {
			return sb.String(), true
		}
		sb.WriteString(text)
	}
	return sb.String(), false
}

const (
	diffContext  = 3
	maxDiffEdits = 2000
)

// splitLines splits s after each LF; a last line without LF is a line.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// diffOp is one line of the edit script: kind ' ' (kept), '-' (removed) or '+' (added); ai
// and bi are the numbers of lines of before and of after that precede it.
type diffOp struct {
	kind   byte
	ai, bi int
}

// diffLines returns the edit script from a to b.
func diffLines(a, b []string) []diffOp {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	// Lines become small integers, so that the middle compares integers.
	ids := map[string]int{}
	intern := func(ls []string) []int {
		out := make([]int, len(ls))
		for i, l := range ls {
			id, ok := ids[l]
			if !ok {
				id = len(ids)
				ids[l] = id
			}
			out[i] = id
		}
		return out
	}
	ma, mb := intern(a[pre:len(a)-suf]), intern(b[pre:len(b)-suf])
	mid, ok := myers(ma, mb, maxDiffEdits)
	if !ok {
		mid = mid[:0]
		for range ma {
			mid = append(mid, '-')
		}
		for range mb {
			mid = append(mid, '+')
		}
	}
	ops := make([]diffOp, 0, pre+len(mid)+suf)
	ai, bi := 0, 0
	emit := func(k byte) {
		ops = append(ops, diffOp{kind: k, ai: ai, bi: bi})
		if k != '+' {
			ai++
		}
		if k != '-' {
			bi++
		}
	}
	for range pre {
		emit(' ')
	}
	for _, k := range mid {
		emit(k)
	}
	for range suf {
		emit(' ')
	}
	return ops
}

// myers returns the kinds of a shortest edit script from a to b, or false when it would need
// more than maxD edits.
func myers(a, b []int, maxD int) ([]byte, bool) {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		out := make([]byte, 0, n+m)
		for range n {
			out = append(out, '-')
		}
		for range m {
			out = append(out, '+')
		}
		return out, n+m <= maxD
	}
	off := n + m
	v := make([]int, 2*off+2)
	// trace[d] is v[-d..d] as it was when step d began.
	var trace [][]int
	for d := 0; d <= min(n+m, maxD); d++ {
		trace = append(trace, append([]int(nil), v[off-d:off+d+1]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(trace, n, m), true
			}
		}
	}
	return nil, false
}

// backtrack walks the trace from (n, m) back to (0, 0) and returns the script in order.
func backtrack(trace [][]int, n, m int) []byte {
	var rev []byte
	x, y := n, m
	for d := len(trace) - 1; d > 0; d-- {
		w := trace[d] // w[i] is v[i-d]
		at := func(k int) int { return w[k+d] }
		k := x - y
		var pk int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := at(pk)
		py := px - pk
		for x > px && y > py {
			rev = append(rev, ' ')
			x--
			y--
		}
		if x == px {
			rev = append(rev, '+')
		} else {
			rev = append(rev, '-')
		}
		x, y = px, py
	}
	for x > 0 {
		rev = append(rev, ' ')
		x--
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// hunk is ops[from:to].
type hunk struct{ from, to int }

// hunks groups the changes of ops with ctx lines of context around each, merging changes
// whose context would meet.
func hunks(ops []diffOp, ctx int) []hunk {
	var out []hunk
	for i := 0; i < len(ops); i++ {
		if ops[i].kind == ' ' {
			continue
		}
		from := max(i-ctx, 0)
		last := i
		for j := i + 1; j < len(ops) && j <= last+2*ctx+1; j++ {
			if ops[j].kind != ' ' {
				last = j
			}
		}
		to := min(last+ctx+1, len(ops))
		if n := len(out); n > 0 && out[n-1].to >= from {
			out[n-1].to = to
		} else {
			out = append(out, hunk{from, to})
		}
		i = last
	}
	return out
}

// render writes one hunk: its header and its lines.
func (h hunk) render(ops []diffOp, a, b []string) string {
	var na, nb int
	for _, o := range ops[h.from:h.to] {
		if o.kind != '+' {
			na++
		}
		if o.kind != '-' {
			nb++
		}
	}
	first := ops[h.from]
	var sb strings.Builder
	sb.WriteString("@@ -")
	sb.WriteString(hunkRange(first.ai, na))
	sb.WriteString(" +")
	sb.WriteString(hunkRange(first.bi, nb))
	sb.WriteString(" @@\n")
	for _, o := range ops[h.from:h.to] {
		line := ""
		if o.kind == '+' {
			line = b[o.bi]
		} else {
			line = a[o.ai]
		}
		sb.WriteByte(o.kind)
		sb.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			sb.WriteString("\n\\ No newline at end of file\n")
		}
	}
	return sb.String()
}

// hunkRange is diff -u's range of n lines after the first `before` lines: "start,n", only
// "start" for one line, and for none the number of the line before.
func hunkRange(before, n int) string {
	switch n {
	case 0:
		return strconv.Itoa(before) + ",0"
	case 1:
		return strconv.Itoa(before + 1)
	}
	return strconv.Itoa(before+1) + "," + strconv.Itoa(n)
}
