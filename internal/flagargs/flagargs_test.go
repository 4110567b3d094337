package flagargs

import (
	"errors"
	"flag"
	"io"
	"slices"
	"testing"
)

// TestParse: flags before, between and after positional arguments are parsed; "--" makes the
// rest positional; -h is flag.ErrHelp and an unknown flag fs.Parse's error.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		args []string
		pos  []string
		sock string
	}{
		{[]string{"g-1", "--socket", "s"}, []string{"g-1"}, "s"},
		{[]string{"--socket", "s", "a", "b"}, []string{"a", "b"}, "s"},
		{[]string{"a", "--socket=s", "b"}, []string{"a", "b"}, "s"},
		{[]string{"a", "--", "--socket", "x"}, []string{"a", "--socket", "x"}, ""},
		{nil, nil, ""},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		sock := fs.String("socket", "", "")
		pos, err := Parse(fs, c.args)
		if err != nil || !slices.Equal(pos, c.pos) || *sock != c.sock {
			t.Errorf("%q: %q %q %v, want %q %q", c.args, pos, *sock, err, c.pos, c.sock)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := Parse(fs, []string{"a", "-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	if _, err := Parse(fs, []string{"a", "--nope"}); err == nil || errors.Is(err, flag.ErrHelp) {
		t.Errorf("an unknown flag: %v", err)
	}
}
