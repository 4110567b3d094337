package protocol

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocsListOperations: docs/protocol.md's handshake row lists the 2.x operations in the
// order the handshake sends them, and its identity table has a row for each. Both had left out
// listRememberedApprovals and forgetApproval, which every 2.x handshake sends.
func TestDocsListOperations(t *testing.T) {
	b, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile("`([A-Za-z]+)`")
	var handshake, identity []string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "| `capabilities.operations` |"):
			cols := strings.Split(line, "|")
			for _, m := range name.FindAllStringSubmatch(cols[len(cols)-2], -1) {
				handshake = append(handshake, m[1])
			}
		case strings.HasPrefix(line, "| `") && (strings.Contains(line, "| 1.x, 2.x |") || strings.Contains(line, "| 2.x |")):
			cols := strings.Split(line, "|")
			for _, m := range name.FindAllStringSubmatch(cols[1], -1) {
				identity = append(identity, m[1])
			}
		}
	}
	// The 2.x column says "the 11, then …": the version 1 operations come first.
	want := Operations(2)
	if got := append(slices.Clone(v1Operations), handshake...); !slices.Equal(got, want) {
		t.Errorf("handshake row lists\n%v\nthe handshake sends\n%v", got, want)
	}
	for _, op := range want {
		if !slices.Contains(identity, op) {
			t.Errorf("the identity table has no row for %s", op)
		}
	}
}
