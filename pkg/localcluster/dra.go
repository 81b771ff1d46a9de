package localcluster

import (
	"context"
	"fmt"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// InstallDeviceClasses creates the DeviceClasses NVIDIA's DRA driver chart
// would install (deploy/kind/deviceclass-gpu.yaml), so claims for the fake
// agent's DRA GPUs resolve. A class that exists is left alone: on an
// existing cluster it is the real chart's.
func (c *Cluster) InstallDeviceClasses(ctx context.Context) error {
	path := filepath.Join(c.RepoRoot, "deploy", "kind", "deviceclass-gpu.yaml")
	objs, err := ReadObjects(path)
	if err != nil {
		return fmt.Errorf("reading DeviceClasses: %w", err)
	}
	for _, o := range objs {
		if err := c.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DeviceClass %s from %s: %w", o.GetName(), path, err)
		}
	}
	return nil
}
