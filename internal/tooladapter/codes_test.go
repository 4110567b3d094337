package tooladapter

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryCodeProvoked fails when a Code constant is not named by any test other than this
// one, of this package or of toolclient, the runtime client that provokes the connection's
// codes: each code must be provoked somewhere.
func TestEveryCodeProvoked(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "codes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && strings.HasPrefix(id.Name, "Code") && id.Obj != nil && id.Obj.Kind == ast.Con {
			codes = append(codes, id.Name)
		}
		return true
	})
	files, _ := filepath.Glob("*_test.go")
	client, _ := filepath.Glob(filepath.Join("toolclient", "*_test.go"))
	files = append(files, client...)
	var tests strings.Builder
	for _, name := range files {
		if name == "codes_test.go" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		tests.Write(b)
	}
	if len(codes) < 30 {
		t.Fatalf("found only %d codes", len(codes))
	}
	for _, c := range codes {
		if !strings.Contains(tests.String(), c) {
			t.Errorf("%s is not provoked by any test", c)
		}
	}
}
