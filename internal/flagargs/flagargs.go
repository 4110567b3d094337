// Package flagargs parses a command line whose flags and positional arguments may come in any
// order, as airlock's and airlock-fs's commands take them: flag.FlagSet.Parse alone stops at
// the first positional argument, so "revoke-grant g-… --admin-socket PATH" left the flag
// unparsed.
package flagargs

import "flag"

// Parse parses args with fs, flags anywhere, and returns the positional arguments in order.
// Everything after "--" is positional. The error is fs.Parse's (flag.ErrHelp after -h).
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
