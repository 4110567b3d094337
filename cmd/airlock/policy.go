package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/protocol"
)

// policyCheckResult is policy check's --json data.
type policyCheckResult struct {
	File     string          `json:"file"`
	Name     string          `json:"name,omitempty"`
	Rules    int             `json:"rules"`
	Examples int             `json:"examples"`
	Failures []policyFailure `json:"failures"`
}

type policyFailure struct {
	Example int             `json:"example"` // 1-based
	Call    policy.Example  `json:"call"`
	Got     policy.Decision `json:"got"`
	Rule    int             `json:"rule"` // 1-based; 0 for the default
}

// codeExamplesFailed is policy check's code when the file is valid and an example fails.
const codeExamplesFailed = "policy_examples_failed"

// policyCheck validates a policy file as airlockd reads it and runs its examples: airlock
// policy check FILE. It needs no daemon. Exit 0 when every example passes, 1 otherwise.
func (a *app) policyCheck(_ context.Context, args []string) int {
	o, fs := a.newCommand("policy check")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {file, name, rules, examples, failures}")
	rest, code, done := a.parse(o, fs, args, "FILE")
	if done {
		return code
	}
	p, err := policy.ReadFile(rest[0])
	if err != nil {
		body := protocol.Error{Code: policy.CodeInvalidPolicy, Message: err.Error()}
		var pe *policy.Error
		if errors.As(err, &pe) && pe.Field != "" {
			body.Details = map[string]any{"field": pe.Field}
		}
		return o.fail(&cliError{body: body, exit: exitFailure})
	}
	doc := p.Document()
	res := policyCheckResult{File: rest[0], Name: doc.Name, Rules: len(doc.Rules), Examples: len(doc.Examples), Failures: []policyFailure{}}
	for _, f := range p.Check() {
		res.Failures = append(res.Failures, policyFailure{Example: f.Index + 1, Call: f.Example, Got: f.Got.Decision, Rule: f.Got.Rule + 1})
	}
	if len(res.Failures) > 0 {
		for _, f := range res.Failures {
			fmt.Fprintf(a.stderr, "example %d: %s expects %s, gets %s (%s)\n", f.Example, exampleTarget(f.Call), f.Call.Expect, f.Got, ruleName(f.Rule))
		}
		return o.failWith(&cliError{body: protocol.Error{Code: codeExamplesFailed,
			Message: fmt.Sprintf("%d of %d examples fail", len(res.Failures), res.Examples)}, exit: exitFailure}, res)
	}
	return o.succeed(res, func(w io.Writer) {
		pass := "pass"
		if res.Examples == 1 {
			pass = "passes"
		}
		fmt.Fprintf(w, "%s: valid, %s, %s %s\n", rest[0], count(res.Rules, "rule"), count(res.Examples, "example"), pass)
	})
}

// count is n with its noun, plural unless n is 1: "1 rule", "0 examples".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func exampleTarget(e policy.Example) string {
	if e.Operation != "" {
		return e.Operation + " " + e.Path
	}
	return e.Capability + "." + e.Action
}

func ruleName(n int) string {
	if n == 0 {
		return "the default"
	}
	return fmt.Sprintf("rule %d", n)
}
