package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCommittedNodesUpToDate keeps deploy/kind/nodes.yaml equal to the
// generator's output; run `make kind-nodes` when it fails.
func TestCommittedNodesUpToDate(t *testing.T) {
	tests := []struct {
		model, committed string
	}{
		{model: "test/e2e/models/hgx-32.yaml", committed: "deploy/kind/nodes.yaml"},
	}
	// render is run from the repository root so the header names the model
	// the way make kind-nodes does.
	t.Chdir(filepath.Join("..", ".."))
	for _, tt := range tests {
		t.Run(tt.committed, func(t *testing.T) {
			want, err := render(tt.model)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(tt.committed)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s is stale; run make kind-nodes (-generated,+committed):\n%s", tt.committed, diff)
			}
		})
	}
}
