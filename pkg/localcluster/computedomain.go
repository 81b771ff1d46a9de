package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
)

// computeDomainDriverDir holds what the local cluster installs of NVIDIA's
// DRA driver for ComputeDomains: its CRD and DeviceClasses. The driver's
// kubelet plugin and controller are played by the fake agent.
var computeDomainDriverDir = filepath.Join("deploy", "third-party", "nvidia-dra-driver-gpu")

// InstallComputeDomainDriver installs the ComputeDomain CRD (waiting until
// it is established) and the DeviceClasses of its channel and daemon
// devices, as NVIDIA's chart does, so that multi-node NVLink jobs get
// ComputeDomains on the local cluster.
func (c *Cluster) InstallComputeDomainDriver(ctx context.Context) error {
	dir := filepath.Join(c.RepoRoot, computeDomainDriverDir)
	if err := c.ApplyCRDFiles(ctx, []string{filepath.Join(dir, "computedomains.yaml")}, nil); err != nil {
		return err
	}
	classes, err := ReadObjects(filepath.Join(dir, "deviceclasses.yaml"))
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, classes...); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return nil
}
