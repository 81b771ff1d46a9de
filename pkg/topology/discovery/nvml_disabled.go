//go:build !nvml

package discovery

import "fmt"

// NVMLBuildTag is the build tag that links the real NVML library in; see
// nvml_gonvml.go.
const NVMLBuildTag = "nvml"

// NewNVML returns the NVML library. This binary was built without the nvml
// build tag, so it has none: Init fails with NVMLErrorLibraryNotFound, which
// Discover reports as ErrNVMLNotFound.
func NewNVML() Library { return missingNVML{} }

// missingNVML is the Library of a binary built without NVML.
type missingNVML struct{}

func (missingNVML) Init() error {
	return fmt.Errorf("built without NVML support (build tag %q): %w", NVMLBuildTag, NVMLErrorLibraryNotFound)
}

func (missingNVML) Shutdown() error { return nil }

func (missingNVML) DeviceCount() (int, error) { return 0, NVMLErrorUninitialized }

func (missingNVML) DeviceByIndex(int) (Device, error) { return nil, NVMLErrorUninitialized }
