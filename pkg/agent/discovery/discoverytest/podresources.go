package discoverytest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResourcesServer is a fake kubelet pod-resources service. It answers
// List with Pods, or fails with Err.
type PodResourcesServer struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	Pods []*podresourcesv1.PodResources
	Err  error
}

// List implements podresourcesv1.PodResourcesListerServer.
func (s *PodResourcesServer) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	if s.Err != nil {
		return nil, s.Err
	}
	return &podresourcesv1.ListPodResourcesResponse{PodResources: s.Pods}, nil
}

// ServePodResources serves srv on a unix socket, as the kubelet does, until
// the test ends, and returns the socket's path. The socket lives in a short
// temporary directory because unix socket paths are limited to 108 bytes,
// which t.TempDir can exceed.
func ServePodResources(t testing.TB, srv *PodResourcesServer) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		t.Fatalf("creating socket directory: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "kubelet.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("listening on %s: %v", socket, err)
	}
	server := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(server, srv)
	go func() { _ = server.Serve(lis) }()
	t.Cleanup(server.Stop)
	return socket
}

// PodWithGPUs is a pod of one container holding the given devices of
// resource.
func PodWithGPUs(namespace, name, container, resource string, deviceIDs ...string) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{
		Namespace: namespace,
		Name:      name,
		Containers: []*podresourcesv1.ContainerResources{{
			Name:    container,
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: resource, DeviceIds: deviceIDs}},
		}},
	}
}
