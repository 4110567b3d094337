package capadapter

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"strings"
	"testing"
)

// documentedCodes is every code this package documents (errors.go): the closed protocol set
// and the local codes. No other code may reach a caller.
var documentedCodes = map[string]string{
	"CodeInvalidRequest": CodeInvalidRequest, "CodeUnsupportedMethod": CodeUnsupportedMethod,
	"CodeUnknownCapability": CodeUnknownCapability, "CodeUnsupportedAction": CodeUnsupportedAction,
	"CodeInvalidArgs": CodeInvalidArgs, "CodeUnavailable": CodeUnavailable, "CodeTooLarge": CodeTooLarge,
	"CodeInternal": CodeInternal, "CodeTimeout": CodeTimeout, "CodeMalformedResponse": CodeMalformedResponse,
	"CodeInvalidDescriptor": CodeInvalidDescriptor, "CodeCapabilityCount": CodeCapabilityCount,
	"CodeDescriptorChanged": CodeDescriptorChanged, "CodeInvalidRegistration": CodeInvalidRegistration,
	"CodeCapabilityConflict": CodeCapabilityConflict, "CodeUnknownAdapter": CodeUnknownAdapter,
	"CodeTooManyAdapters": CodeTooManyAdapters, "CodeAdapterChanged": CodeAdapterChanged,
	"CodeLeaseExpired": CodeLeaseExpired, "CodeResultWithheld": CodeResultWithheld,
}

// TestErrorCodesAreDocumented reads this package's sources: every *Error is built with a
// documented Code constant, except the adapter's own code (already checked against the
// closed set by DecodeResponse) and the code parameters of the two constructors.
func TestErrorCodesAreDocumented(t *testing.T) {
	if len(documentedCodes) != len(protocolCodes)+12 {
		t.Fatalf("documentedCodes has %d entries", len(documentedCodes))
	}
	for name, code := range documentedCodes {
		if w := WireCode(&Error{Code: code}); !IsProtocolCode(w) && w != CodeResultWithheld {
			t.Errorf("%s maps to %q on the wire", name, w)
		}
	}
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		check := func(e ast.Expr) {
			switch x := e.(type) {
			case *ast.Ident:
				if _, ok := documentedCodes[x.Name]; ok || x.Name == "code" {
					return
				}
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == "resp" && x.Sel.Name == "ErrorCode" {
					return
				}
			}
			t.Errorf("%s: an *Error is built with code %s, not a documented constant", fset.Position(e.Pos()), types.ExprString(e))
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				if id, ok := x.Fun.(*ast.Ident); ok && (id.Name == "newError" || id.Name == "asError") && len(x.Args) == 2 {
					if id.Name == "newError" {
						check(x.Args[0])
					} else {
						check(x.Args[1])
					}
				}
			case *ast.CompositeLit:
				if id, ok := x.Type.(*ast.Ident); ok && id.Name == "Error" {
					for _, el := range x.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok && kv.Key.(*ast.Ident).Name == "Code" {
							check(kv.Value)
						}
					}
				}
			}
			return true
		})
	}
}

// TestWireMessage: the message a wire error carries beside its code does not repeat the code
// (as Error's "capadapter: CODE: " did: "airlock: invalid_args: capadapter: invalid_args: …");
// it keeps a finer code the wire code projects away, and says when the adapter reported it.
func TestWireMessage(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"the runtime's invalid_args", &Error{Code: CodeInvalidArgs, Detail: `argument "on" must be true or false`}, `argument "on" must be true or false`},
		{"wrapped", fmt.Errorf("invoke: %w", &Error{Code: CodeInvalidArgs, Detail: "args exceed 1024 bytes"}), "args exceed 1024 bytes"},
		{"the adapter's own", &Error{Code: CodeInvalidArgs, FromAdapter: true, Detail: "invoke failed"}, "invoke failed (reported by the adapter)"},
		{"the adapter's own, no detail", &Error{Code: CodeInternal, FromAdapter: true}, "reported by the adapter"},
		{"projected", &Error{Code: CodeTimeout, Detail: "the adapter did not answer before the deadline"}, "timeout: the adapter did not answer before the deadline"},
		{"projected, no detail", &Error{Code: CodeMalformedResponse}, CodeMalformedResponse},
		{"no detail", &Error{Code: CodeUnavailable}, CodeUnavailable},
		{"not an *Error", errors.New("boom"), "boom"},
	} {
		if got := WireMessage(c.err, WireCode(c.err)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
