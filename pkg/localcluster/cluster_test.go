package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartRejectsBadModelBeforeClusterWork checks a bad model fails Start
// with the file and field named, and before anything is created: no temp dir,
// no process (there are no binaries to run in RepoRoot at all).
func TestStartRejectsBadModelBeforeClusterWork(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	model := filepath.Join(tmp, "bad.yaml")
	bad := `apiVersion: lockstep.dev/v1alpha1
kind: ClusterModel
levels:
  - {name: leaf}
pools:
  - {name: a, profile: hgx-h200, nodes: -1, nodesPerDomain: {leaf: 1}}
`
	if err := os.WriteFile(model, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Options{RepoRoot: filepath.Join(tmp, "no-repo"), Model: model})
	if err == nil {
		t.Fatal("Start succeeded with a bad model")
	}
	for _, want := range []string{
		model,
		"levels[0].nodeLabel: Required value",
		`pools[0].profile: Unsupported value: "hgx-h200"`,
		"pools[0].nodes: Invalid value: -1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(tmp, TempDirPrefix+"*"))
	if len(leftovers) > 0 {
		t.Errorf("Start created %v before rejecting the model", leftovers)
	}
}
