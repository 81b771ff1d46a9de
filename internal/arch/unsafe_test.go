package arch

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoUnsafe: no code we ship imports unsafe or calls reflect.NewAt, the
// pair that reads another package's unexported fields. What we need of
// other projects we take through their exported API; what they do not
// export is theirs to change.
func TestNoUnsafe(t *testing.T) {
	files := 0
	for _, dir := range []string{"pkg", "cmd"} {
		err := filepath.WalkDir(filepath.Join("../..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			files++
			for _, problem := range unsafeUses(t, path) {
				t.Errorf("%s: %s", problem, "use the exported API instead")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files == 0 {
		t.Fatal("no Go files under pkg/ or cmd/")
	}
}

// unsafeUses lists where the file at path imports unsafe or calls
// reflect.NewAt, under whatever name it imports reflect.
func unsafeUses(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	var out []string
	reflectNames := map[string]bool{}
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			t.Fatalf("%s: import %s: %v", fset.Position(imp.Pos()), imp.Path.Value, err)
		}
		switch p {
		case "unsafe":
			out = append(out, fset.Position(imp.Pos()).String()+": imports unsafe")
		case "reflect":
			name := "reflect"
			if imp.Name != nil {
				name = imp.Name.Name
			}
			reflectNames[name] = true
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "NewAt" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && reflectNames[x.Name] {
			out = append(out, fset.Position(sel.Pos()).String()+": uses reflect.NewAt")
		}
		return true
	})
	return out
}

// TestUnsafeUses: the check finds what it looks for, under any import name,
// and nothing in a file that has neither.
func TestUnsafeUses(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"clean", "package p\nimport \"reflect\"\nvar _ = reflect.DeepEqual(1, 1)\n", 0},
		{"unsafe", "package p\nimport \"unsafe\"\nvar _ = unsafe.Sizeof(1)\n", 1},
		{"NewAt", "package p\nimport \"reflect\"\nvar f = reflect.NewAt\n", 1},
		{"NewAt renamed", "package p\nimport r \"reflect\"\nfunc f() { r.NewAt(nil, nil) }\n", 1},
		{"both", "package p\nimport (\n\"reflect\"\n\"unsafe\"\n)\nfunc f(v reflect.Value) { reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())) }\n", 2},
		{"another NewAt", "package p\ntype x struct{}\nfunc (x) NewAt() {}\nfunc f() { x{}.NewAt() }\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f.go")
			if err := writeFile(path, tc.src); err != nil {
				t.Fatal(err)
			}
			if got := unsafeUses(t, path); len(got) != tc.want {
				t.Errorf("found %q, want %d", got, tc.want)
			}
		})
	}
}

func writeFile(path, src string) error { return os.WriteFile(path, []byte(src), 0o600) }
