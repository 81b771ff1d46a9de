// Package envtest starts the apiserver our envtest-style tests and the
// in-process scheduler benchmark run against: etcd and kube-apiserver from
// the module's bin/ (`make tools` builds them) with the CRDs of deploy/crds.
package envtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Binaries are the binaries Start runs, from the module's bin/.
var Binaries = []string{"etcd", "kube-apiserver"}

// ModuleRoot finds the directory of go.mod at or above the working
// directory (go test runs in the package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Start starts etcd and kube-apiserver from root/bin with root/deploy/crds
// installed, and returns the environment (Stop it) and a config of an
// administrator. Missing binaries are an error, not a skip: `make unit`
// builds them first.
func Start(root string, scheme *runtime.Scheme) (*envtest.Environment, *rest.Config, error) {
	bin := filepath.Join(root, "bin")
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, nil, fmt.Errorf("%s is missing (%v): run `make tools` to build etcd and kube-apiserver into %s", b, err, bin)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(root, "deploy", "crds")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, nil, fmt.Errorf("starting the apiserver from %s: %w", bin, err)
	}
	return env, cfg, nil
}
