// Package policy is the operator's rules for local agents: for each fs operation and each
// capability action, allow, ask or deny, with path globs for the fs operations.
//
// A Policy is an ordered list of rules and a default; the first rule that matches a call
// decides it, as in a firewall. A file policy carries examples that Check runs, so that a
// policy is tested where it is written (airlock policy check FILE). Parsing is strict: an
// unknown key, a duplicate or case-variant key, an unknown operation or decision, or a bad
// glob is refused with the field that holds it.
//
// The gate (internal/gate) asks Decide about every call; Decide is pure and safe for
// concurrent use.
package policy

import (
	"strings"
)

// Decision is what a rule says about a call.
type Decision string

// Decisions.
const (
	Allow Decision = "allow"
	Ask   Decision = "ask"
	Deny  Decision = "deny"
)

// valid reports whether d is one of the three decisions.
func (d Decision) valid() bool { return d == Allow || d == Ask || d == Deny }

// rank orders decisions by restriction, for Stricter.
func (d Decision) rank() int {
	switch d {
	case Allow:
		return 0
	case Ask:
		return 1
	}
	return 2
}

// Stricter returns the more restrictive of a and b: deny over ask over allow.
func Stricter(a, b Decision) Decision {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// The fs operations a rule may name (tooladapter's six), and the capability action a rule
// names for an observation.
const (
	OpList   = "fs.list"
	OpStat   = "fs.stat"
	OpRead   = "fs.read"
	OpSearch = "fs.search"
	OpWrite  = "fs.write"
	OpEdit   = "fs.edit"
	// ActionObserve is the action a rule names to match observeCapability.
	ActionObserve = "observe"
)

// FSOperations are the operations a rule may name, in the adapter protocol's order.
var FSOperations = []string{OpList, OpStat, OpRead, OpSearch, OpWrite, OpEdit}

func isFSOperation(op string) bool {
	for _, o := range FSOperations {
		if o == op {
			return true
		}
	}
	return false
}

// Policy is a parsed, valid policy. The zero value is not valid; use Parse, Named or
// AllowAll.
type Policy struct {
	doc   Document
	rules []rule
}

// Document is a policy's wire form, as a file holds it and as a session's describe shows it.
type Document struct {
	// Name labels the policy for humans (session show, approval entries).
	Name string `json:"name,omitempty"`
	// Default decides a call that no rule matches.
	Default Decision `json:"default"`
	// Rules are tried in order; the first that matches decides.
	Rules []Rule `json:"rules,omitempty"`
	// Examples are calls with the decision they must get; Check runs them.
	Examples []Example `json:"examples,omitempty"`
	// Proposals, when "allow", gives the session's agent the tools to propose adapters
	// (internal/proposal), each of which still waits for the operator's approval to run and
	// another to publish; absent or "deny" gives it none. "ask" is refused: a proposal always
	// asks.
	Proposals Decision `json:"proposals,omitempty"`
}

// Rule matches fs operations (Operations, optionally Paths) or capability actions
// (Capability, optionally Actions), never both.
type Rule struct {
	// Operations are fs operations ("fs.write"), or "fs.*" for all six.
	Operations []string `json:"operations,omitempty"`
	// Paths are globs over the call's path argument, relative to the session's working
	// directory: "*" and "?" and classes within one segment, "**" for any number of
	// segments. None matches every path.
	Paths []string `json:"paths,omitempty"`
	// Capability is a capability id, or "*" for every capability.
	Capability string `json:"capability,omitempty"`
	// Actions are action names ("observe" for observations). None matches every action.
	Actions []string `json:"actions,omitempty"`
	// Decision is what a matching call gets.
	Decision Decision `json:"decision"`
	// Why is shown to the human and the model beside the decision.
	Why string `json:"why,omitempty"`
}

// Example is a call and the decision the policy must give it.
type Example struct {
	Operation  string   `json:"operation,omitempty"`
	Path       string   `json:"path,omitempty"`
	Capability string   `json:"capability,omitempty"`
	Action     string   `json:"action,omitempty"`
	Expect     Decision `json:"expect"`
}

type rule struct {
	Rule
	ops   map[string]bool // nil: none (a capability rule)
	globs []glob
}

// Verdict is a decision and the rule that gave it: Rule is the index of the matching rule,
// -1 for the default.
type Verdict struct {
	Decision Decision
	Rule     int
	Why      string
}

// Reason describes the verdict for a human: which rule decided.
func (v Verdict) Reason() string {
	if v.Rule < 0 {
		return "the policy's default"
	}
	s := "rule " + itoa(v.Rule+1)
	if v.Why != "" {
		s += ": " + v.Why
	}
	return s
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// Document returns the policy's wire form (a copy the caller may keep).
func (p *Policy) Document() Document { return p.doc }

// Name returns the policy's label.
func (p *Policy) Name() string { return p.doc.Name }

// UsesPaths reports whether some rule about op looks at the path, so that a caller can skip
// finding the path of a call no rule distinguishes by it.
func (p *Policy) UsesPaths(op string) bool {
	for i := range p.rules {
		r := &p.rules[i]
		if r.ops[op] && len(r.globs) > 0 {
			return true
		}
	}
	return false
}

// AllowsProposals reports whether the session's agent may propose adapters.
func (p *Policy) AllowsProposals() bool { return p != nil && p.doc.Proposals == Allow }

// DeniesProposals reports whether the policy says "proposals": "deny": as the host's
// policy, no session may propose adapters, whatever its own policy allows.
func (p *Policy) DeniesProposals() bool { return p != nil && p.doc.Proposals == Deny }

// Trivial reports whether the policy allows every call: no rules, and allow by default.
func (p *Policy) Trivial() bool { return len(p.rules) == 0 && p.doc.Default == Allow }

// DecideFS decides an fs operation on path (relative to the session's working directory, as
// the call names it; "" when the call has none or it was not looked at).
func (p *Policy) DecideFS(op, path string) Verdict {
	segs := splitPath(path)
	for i := range p.rules {
		r := &p.rules[i]
		if !r.ops[op] {
			continue
		}
		if len(r.globs) > 0 && !anyGlob(r.globs, segs) {
			continue
		}
		return Verdict{Decision: r.Decision, Rule: i, Why: r.Why}
	}
	return Verdict{Decision: p.doc.Default, Rule: -1}
}

// MayAskFS reports whether some path makes the verdict of fs operation op ask, without
// allocating: a door that must not block where the gate runs moves such a call elsewhere
// first.
func (p *Policy) MayAskFS(op string) bool {
	for i := range p.rules {
		r := &p.rules[i]
		if !r.ops[op] {
			continue
		}
		if r.Decision == Ask {
			return true
		}
		if len(r.globs) == 0 {
			return false // nothing after an unconditional rule is reached
		}
	}
	return p.doc.Default == Ask
}

// DecideAction decides an action of a capability ("observe" for an observation).
func (p *Policy) DecideAction(capability, action string) Verdict {
	for i := range p.rules {
		r := &p.rules[i]
		if r.ops != nil {
			continue
		}
		if r.Capability != "*" && r.Capability != capability {
			continue
		}
		if len(r.Actions) > 0 && !contains(r.Actions, action) {
			continue
		}
		return Verdict{Decision: r.Decision, Rule: i, Why: r.Why}
	}
	return Verdict{Decision: p.doc.Default, Rule: -1}
}

// Summary describes, in one short line per operation, what the policy decides for op
// regardless of path: "allow", "deny", or "depends on the path" — what an MCP tool
// description tells a model.
func (p *Policy) Summary(op string) string {
	seen := map[Decision]bool{}
	for i := range p.rules {
		r := &p.rules[i]
		if !r.ops[op] {
			continue
		}
		seen[r.Decision] = true
		if len(r.globs) == 0 {
			// Nothing after an unconditional rule is reached.
			return summarize(seen)
		}
	}
	seen[p.doc.Default] = true
	return summarize(seen)
}

// SummaryAction is Summary for a capability action.
func (p *Policy) SummaryAction(capability, action string) string {
	return string(p.DecideAction(capability, action).Decision)
}

func summarize(seen map[Decision]bool) string {
	if len(seen) == 1 {
		for d := range seen {
			return string(d)
		}
	}
	var parts []string
	for _, d := range []Decision{Allow, Ask, Deny} {
		if seen[d] {
			parts = append(parts, string(d))
		}
	}
	return strings.Join(parts, " or ") + " by path"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
