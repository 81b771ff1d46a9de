package localcluster

import (
	"context"
	"fmt"
	"path/filepath"
)

// nvidiaDRADriverDir holds what the local cluster installs of NVIDIA's DRA
// driver chart (nvidia-dra-driver-gpu): the ComputeDomain CRD and the
// DeviceClasses of its GPU, channel and daemon devices. Its kubelet plugins
// and ComputeDomain controller are played by the fake agent.
var nvidiaDRADriverDir = filepath.Join("deploy", "third-party", "nvidia-dra-driver-gpu")

// InstallNVIDIADRADriver installs the ComputeDomain CRD (waiting until it
// is established) and the chart's DeviceClasses, so that claims for the
// fake agent's DRA GPUs resolve and multi-node NVLink jobs get
// ComputeDomains on the local cluster.
func (c *Cluster) InstallNVIDIADRADriver(ctx context.Context) error {
	dir := filepath.Join(c.RepoRoot, nvidiaDRADriverDir)
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
