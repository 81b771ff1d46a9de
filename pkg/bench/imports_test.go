package bench

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package pure: the standard library, our topology
// packages, the contract (pkg/lockstep, standard library only) and gonum's
// plot, never a Kubernetes client.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	mustNoError(t, err)
	allowed := []string{"github.com/lockstep-dev/lockstep/pkg/topology", "github.com/lockstep-dev/lockstep/pkg/lockstep", "gonum.org/v1/plot"}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		mustNoError(t, err)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			std := !strings.Contains(strings.Split(path, "/")[0], ".")
			ok := std
			for _, prefix := range allowed {
				ok = ok || path == prefix || strings.HasPrefix(path, prefix+"/")
			}
			if !ok {
				t.Errorf("%s imports %s: pkg/bench may import only the standard library, %v", name, path, allowed)
			}
		}
	}
}
