package policy

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Bounds of a policy document.
const (
	// MaxBytes bounds a policy file or an inline policy.
	MaxBytes = 256 << 10
	// MaxRules bounds the rules of one policy, and MaxGlobs the paths of one rule: a
	// decision walks every rule, so a call's cost stays bounded.
	MaxRules = 256
	MaxGlobs = 64
	// MaxExamples bounds the examples of one policy.
	MaxExamples = 1024
	// maxText bounds a name, a capability id, an action and a why.
	maxText = 256
)

// CodeInvalidPolicy is the code of every error Parse returns.
const CodeInvalidPolicy = "invalid_policy"

// Error is a refused policy: the field that holds the problem (a JSON path such as
// "rules[2].paths[0]") and why.
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return "invalid policy: " + e.Reason
	}
	return "invalid policy: " + e.Field + ": " + e.Reason
}

func fieldErr(field, format string, args ...any) *Error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Parse decodes and checks a policy document strictly: unknown, duplicate and case-variant
// keys, unknown operations and decisions, bad globs and rules that mix fs and capability
// matches are refused with the field. Examples are checked for form, not run (Check runs them).
func Parse(data []byte) (*Policy, error) {
	if len(data) > MaxBytes {
		return nil, &Error{Reason: fmt.Sprintf("larger than %d bytes", MaxBytes)}
	}
	var doc Document
	if err := ndjson.Decode(data, &doc, ndjson.Closed); err != nil {
		var de *ndjson.DecodeError
		if errors.As(err, &de) {
			return nil, &Error{Field: de.Path, Reason: de.Error()}
		}
		return nil, &Error{Reason: err.Error()}
	}
	return FromDocument(doc)
}

// FromDocument checks a document as Parse does.
func FromDocument(doc Document) (*Policy, error) {
	if !text(doc.Name, true) {
		return nil, fieldErr("name", "must be at most %d characters without control characters", maxText)
	}
	if !doc.Default.valid() {
		return nil, fieldErr("default", "must be allow, ask or deny")
	}
	if doc.Proposals != "" && doc.Proposals != Allow && doc.Proposals != Deny {
		return nil, fieldErr("proposals", "must be allow or deny (a proposal always waits for the operator)")
	}
	if len(doc.Rules) > MaxRules {
		return nil, fieldErr("rules", "more than %d rules", MaxRules)
	}
	if len(doc.Examples) > MaxExamples {
		return nil, fieldErr("examples", "more than %d examples", MaxExamples)
	}
	p := &Policy{doc: doc, rules: make([]rule, len(doc.Rules))}
	for i, r := range doc.Rules {
		f := fmt.Sprintf("rules[%d]", i)
		if !r.Decision.valid() {
			return nil, fieldErr(f+".decision", "must be allow, ask or deny")
		}
		if !text(r.Why, true) {
			return nil, fieldErr(f+".why", "must be at most %d characters without control characters", maxText)
		}
		fs, capRule := len(r.Operations) > 0, r.Capability != ""
		switch {
		case fs && capRule:
			return nil, fieldErr(f, "names both operations and a capability; write two rules")
		case !fs && !capRule:
			return nil, fieldErr(f, "names neither operations nor a capability")
		case fs && len(r.Actions) > 0:
			return nil, fieldErr(f+".actions", "actions belong to a capability rule")
		case capRule && len(r.Paths) > 0:
			return nil, fieldErr(f+".paths", "paths belong to an fs rule")
		}
		p.rules[i].Rule = r
		if fs {
			p.rules[i].ops = map[string]bool{}
			for j, op := range r.Operations {
				switch {
				case op == "fs.*":
					for _, o := range FSOperations {
						p.rules[i].ops[o] = true
					}
				case isFSOperation(op):
					p.rules[i].ops[op] = true
				default:
					return nil, fieldErr(fmt.Sprintf("%s.operations[%d]", f, j), "unknown operation %q (one of fs.list, fs.stat, fs.read, fs.search, fs.write, fs.edit, fs.*)", bounded(op))
				}
			}
			if len(r.Paths) > MaxGlobs {
				return nil, fieldErr(f+".paths", "more than %d globs", MaxGlobs)
			}
			for j, s := range r.Paths {
				g, err := parseGlob(s)
				if err != nil {
					return nil, fieldErr(fmt.Sprintf("%s.paths[%d]", f, j), "%v", err)
				}
				p.rules[i].globs = append(p.rules[i].globs, g)
			}
			continue
		}
		if r.Capability != "*" && !text(r.Capability, false) {
			return nil, fieldErr(f+".capability", "must be a capability id or \"*\"")
		}
		for j, a := range r.Actions {
			if !text(a, false) {
				return nil, fieldErr(fmt.Sprintf("%s.actions[%d]", f, j), "must be 1 to %d characters without control characters", maxText)
			}
		}
	}
	for i, ex := range doc.Examples {
		f := fmt.Sprintf("examples[%d]", i)
		if !ex.Expect.valid() {
			return nil, fieldErr(f+".expect", "must be allow, ask or deny")
		}
		switch {
		case ex.Operation != "" && ex.Capability != "":
			return nil, fieldErr(f, "names both an operation and a capability")
		case ex.Operation != "":
			if !isFSOperation(ex.Operation) {
				return nil, fieldErr(f+".operation", "unknown operation %q", bounded(ex.Operation))
			}
			if ex.Action != "" {
				return nil, fieldErr(f+".action", "an action belongs to a capability example")
			}
		case ex.Capability != "":
			if ex.Path != "" {
				return nil, fieldErr(f+".path", "a path belongs to an fs example")
			}
			if !text(ex.Capability, false) || !text(ex.Action, false) {
				return nil, fieldErr(f, "needs a capability and an action")
			}
		default:
			return nil, fieldErr(f, "names neither an operation nor a capability")
		}
	}
	return p, nil
}

// ReadFile reads and parses a policy file the operator owns: a regular file of this
// process's uid that no other user may write, at most MaxBytes. It does not block on a name
// that is no regular file (a FIFO is refused, not waited on).
func ReadFile(name string) (*Policy, error) {
	f, err := openNonblock(name)
	if err != nil {
		return nil, &Error{Reason: fmt.Sprintf("cannot open the policy file: %v", err)}
	}
	defer f.Close()
	if err := ownedByOperator(f); err != nil {
		return nil, err
	}
	buf := make([]byte, MaxBytes+1)
	n, err := readFull(f, buf)
	if err != nil {
		return nil, &Error{Reason: fmt.Sprintf("cannot read the policy file: %v", err)}
	}
	return Parse(buf[:n])
}

func readFull(f *os.File, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil {
			if errors.Is(err, errEOF) {
				return n, nil
			}
			return n, err
		}
	}
	return n, nil
}

// Failure is an example the policy decides otherwise than it expects.
type Failure struct {
	Index   int
	Example Example
	Got     Verdict
}

// Check runs the policy's examples and returns those it decides otherwise, in order.
func (p *Policy) Check() []Failure {
	var out []Failure
	for i, ex := range p.doc.Examples {
		var v Verdict
		if ex.Operation != "" {
			v = p.DecideFS(ex.Operation, ex.Path)
		} else {
			v = p.DecideAction(ex.Capability, ex.Action)
		}
		if v.Decision != ex.Expect {
			out = append(out, Failure{Index: i, Example: ex, Got: v})
		}
	}
	return out
}

func text(s string, emptyOK bool) bool {
	if s == "" {
		return emptyOK
	}
	if len(s) > maxText || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// bounded cuts a refused value for an error message.
func bounded(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Named policies an open may name instead of a file.
var named = map[string]Document{
	"allow-all": {Name: "allow-all", Default: Allow},
	"read-only": {Name: "read-only", Default: Allow, Rules: []Rule{
		{Operations: []string{OpWrite, OpEdit}, Decision: Deny, Why: "read-only session"},
	}},
	"ask-writes": {Name: "ask-writes", Default: Allow, Rules: []Rule{
		{Operations: []string{OpWrite, OpEdit}, Decision: Ask, Why: "every write waits for the operator"},
	}},
	"deny-all": {Name: "deny-all", Default: Deny},
}

// Names returns the names Named knows, sorted.
func Names() []string {
	out := make([]string, 0, len(named))
	for n := range named {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Named returns a built-in policy by name: allow-all, read-only, ask-writes or deny-all.
func Named(name string) (*Policy, bool) {
	doc, ok := named[name]
	if !ok {
		return nil, false
	}
	p, err := FromDocument(doc)
	if err != nil {
		panic("policy: built-in policy " + name + " invalid: " + err.Error())
	}
	return p, true
}

// AllowAll returns the policy that allows every call.
func AllowAll() *Policy {
	p, _ := Named("allow-all")
	return p
}
