package main

import (
	"os"
	"strings"
	"testing"
)

func TestCheckDockerfile(t *testing.T) {
	bins := []binary{{name: "a"}, {name: "b"}}
	const build = "FROM golang:1 AS build\nRUN hack/build-image.sh /out\n"
	tests := []struct {
		name       string
		dockerfile string
		wantErr    string // empty: no error
	}{
		{
			name:       "numeric non-root users",
			dockerfile: build + "FROM x AS a\nCOPY --from=build /out/a /a\nUSER 65532:65532\nFROM y AS b\nCOPY --from=build /out/b /b\nUSER 1000\n",
		},
		{
			name:       "named user",
			dockerfile: build + "FROM x AS a\nCOPY --from=build /out/a /out/b /\nUSER nonroot\n",
			wantErr:    "not numeric",
		},
		{
			name:       "root",
			dockerfile: build + "FROM x AS a\nCOPY --from=build /out/a /out/b /\nUSER 0:0\n",
			wantErr:    "runs as root",
		},
		{
			name:       "no user",
			dockerfile: build + "FROM x AS a\nCOPY --from=build /out/a /out/b /\n",
			wantErr:    "sets no USER",
		},
		{
			name:       "a binary not shipped",
			dockerfile: build + "FROM x AS a\nCOPY --from=build /out/a /a\nUSER 1\n",
			wantErr:    "no runtime stage copies b",
		},
		{
			name:       "built some other way",
			dockerfile: "FROM golang:1 AS build\nRUN go build \\\n  -o /out/a ./cmd/a\nFROM x\nCOPY --from=build /out/a /out/b /\nUSER 1\n",
			wantErr:    "no RUN hack/build-image.sh",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkDockerfile(strings.NewReader(tt.dockerfile), bins)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestRepositoryDockerfile keeps the committed Dockerfile passing the check
// even where image-check is not run.
func TestRepositoryDockerfile(t *testing.T) {
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := checkDockerfile(f, binaries); err != nil {
		t.Error(err)
	}
}
