package mcp

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestUnifiedDiffIsDiffU compares unifiedDiff with GNU diff -u on edits whose shortest script
// is unique (so that any correct diff program writes the same hunks): insertions at the
// start, changes merged into one hunk (6 lines apart) and kept apart (7), a last line without
// LF, a file emptied, a file made from nothing, and CRLF lines.
func TestUnifiedDiffIsDiffU(t *testing.T) {
	diffBin, err := exec.LookPath("diff")
	if err != nil {
		t.Skip("GNU diff is not installed")
	}
	nums := func(repl map[int]string) string {
		var sb strings.Builder
		for i := 1; i <= 16; i++ {
			if r, ok := repl[i]; ok {
				sb.WriteString(r)
			} else {
				sb.WriteString(strconv.Itoa(i) + "\n")
			}
		}
		return sb.String()
	}
	cases := []struct{ name, before, after string }{
		{"insert at start", "a\nb\nc\n", "x\na\nb\nc\n"},
		{"merged hunks", nums(nil), nums(map[int]string{2: "two\n", 9: "nine\n"})},
		{"two hunks", nums(nil), nums(map[int]string{2: "two\n", 10: "ten\n"})},
		{"no final newline", "a\nb", "a\nc"},
		{"newline added at the end", "a\nb", "a\nb\n"},
		{"emptied", "a\n", ""},
		{"from nothing", "", "a\nb\n"},
		{"crlf", "one\r\ntwo\r\nthree\r\n", "one\r\n2\r\nthree\r\n"},
		{"delete in the middle", nums(nil), nums(map[int]string{8: "", 9: ""})},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, truncated := unifiedDiff("f.txt", c.before, c.after, 1<<20)
			if truncated {
				t.Fatal("truncated")
			}
			a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			os.WriteFile(a, []byte(c.before), 0o600)
			os.WriteFile(b, []byte(c.after), 0o600)
			out, _ := exec.Command(diffBin, "-u", "--label", "a/f.txt", "--label", "b/f.txt", a, b).Output()
			if got != string(out) {
				t.Fatalf("unifiedDiff:\n%s\ndiff -u:\n%s", got, out)
			}
		})
	}
	if d, _ := unifiedDiff("f", "same\n", "same\n", 100); d != "" {
		t.Fatalf("equal texts: %q", d)
	}
}

// TestUnifiedDiffBounds: a diff that would pass its limit keeps whole hunks only and says
// so; one whose edit script passes maxDiffEdits is one replacement of the lines between the
// common first and last lines, and still applies.
func TestUnifiedDiffBounds(t *testing.T) {
	before := strings.Repeat("same\n", 40)
	lines := splitLines(before)
	lines[0], lines[30] = "first\n", "last\n"
	after := strings.Join(lines, "")
	full, truncated := unifiedDiff("f", before, after, 1<<20)
	if truncated || strings.Count(full, "@@ -") != 2 {
		t.Fatalf("full diff (truncated %v):\n%s", truncated, full)
	}
	first := full[:strings.LastIndex(full, "@@ -")]
	cut, truncated := unifiedDiff("f", before, after, len(full)-1)
	if !truncated || cut != first {
		t.Fatalf("cut diff (truncated %v):\n%s\nwant:\n%s", truncated, cut, first)
	}

	var a, b strings.Builder
	for i := range 3 * maxDiffEdits {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
	}
	big, _ := unifiedDiff("f", "top\n"+a.String()+"end\n", "top\n"+b.String()+"end\n", 1<<30)
	if !strings.HasPrefix(big, "--- a/f\n+++ b/f\n@@ -1,6002 +1,6002 @@\n top\n-a0\n") {
		t.Fatalf("large diff begins %q", big[:80])
	}
	if got, err := applyDiff("top\n"+a.String()+"end\n", big); err != nil || got != "top\n"+b.String()+"end\n" {
		t.Fatalf("large diff does not apply: %v", err)
	}
}

// TestUnifiedDiffApplies applies the diffs of random line edits and requires the result.
func TestUnifiedDiffApplies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		before, after := randomText(r), randomText(r)
		d, _ := unifiedDiff("f", before, after, 1<<30)
		got, err := applyDiff(before, d)
		if err != nil || got != after {
			t.Fatalf("before %q after %q: %v\n%s", before, after, err, d)
		}
	}
}

func randomText(r *rand.Rand) string {
	var sb strings.Builder
	for range r.IntN(12) {
		sb.WriteString([]string{"a", "b", "c", "", "d e"}[r.IntN(5)])
		if r.IntN(8) > 0 {
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

func FuzzUnifiedDiff(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\n")
	f.Add("a\nb", "a\nb\n")
	f.Add("", "x")
	f.Add("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n")
	f.Fuzz(func(t *testing.T, before, after string) {
		d, truncated := unifiedDiff("f", before, after, 1<<30)
		if truncated {
			t.Fatal("truncated")
		}
		if (d == "") != (before == after) {
			t.Fatalf("diff %q of %q and %q", d, before, after)
		}
		got, err := applyDiff(before, d)
		if err != nil || got != after {
			t.Fatalf("before %q after %q: %v\n%s", before, after, err, d)
		}
	})
}

// applyDiff applies a unified diff as patch does, checking every context and removed line
// and every hunk's counts.
func applyDiff(before, d string) (string, error) {
	if d == "" {
		return before, nil
	}
	src := splitLines(before)
	lines := strings.SplitAfter(d, "\n")
	if len(lines) < 2 || lines[0] != "--- a/f\n" || lines[1] != "+++ b/f\n" {
		return "", fmt.Errorf("headers %q", lines[:min(2, len(lines))])
	}
	var out []string
	pos := 0
	i := 2
	for i < len(lines) && lines[i] != "" {
		h := lines[i]
		parts := strings.Fields(strings.Trim(h, "@ \n"))
		if len(parts) != 2 {
			return "", fmt.Errorf("hunk header %q", h)
		}
		parse := func(s string) (int, int) {
			s = s[1:]
			if k := strings.IndexByte(s, ','); k >= 0 {
				x, _ := strconv.Atoi(s[:k])
				y, _ := strconv.Atoi(s[k+1:])
				return x, y
			}
			x, _ := strconv.Atoi(s)
			return x, 1
		}
		as, an := parse(parts[0])
		_, bn := parse(parts[1])
		start := as - 1
		if an == 0 {
			start = as
		}
		if start < pos || start > len(src) {
			return "", fmt.Errorf("hunk %q starts at %d, at %d", h, start, pos)
		}
		out = append(out, src[pos:start]...)
		pos = start
		i++
		var na, nb int
		for i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "@@") {
			l := lines[i]
			i++
			body := l[1:]
			if i < len(lines) && lines[i] == "\\ No newline at end of file\n" {
				body = strings.TrimSuffix(body, "\n")
				i++
			}
			switch l[0] {
			case ' ', '-':
				if pos >= len(src) || src[pos] != body {
					return "", fmt.Errorf("line %d is %q in the diff", pos+1, body)
				}
				pos++
				na++
				if l[0] == ' ' {
					out = append(out, body)
					nb++
				}
			case '+':
				out = append(out, body)
				nb++
			default:
				return "", fmt.Errorf("line %q", l)
			}
		}
		if na != an || nb != bn {
			return "", fmt.Errorf("hunk %q has %d and %d lines", h, na, nb)
		}
	}
	out = append(out, src[pos:]...)
	return strings.Join(out, ""), nil
}
