//go:build !nvml

package discovery_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/topology/discovery"
)

// TestNewNVMLWithoutNVMLTag checks that a binary built without NVML says so
// through the same error as a node without the driver.
func TestNewNVMLWithoutNVMLTag(t *testing.T) {
	_, err := discovery.Discover(context.Background(), discovery.Options{NVML: discovery.NewNVML()})
	if !errors.Is(err, discovery.ErrNVMLNotFound) {
		t.Fatalf("Discover = %v, want %v", err, discovery.ErrNVMLNotFound)
	}
	if !strings.Contains(err.Error(), `build tag "nvml"`) {
		t.Errorf("error %q does not name the build tag", err)
	}
}
