// Package discovery finds a node's GPU hardware for the topology agent: it
// turns NVML, sysfs and the kubelet's pod-resources API into a
// topology.NodeTopology, with each GPU's health and, when asked for, the
// GPUs the kubelet has handed out. Discover is the entry point.
//
// Unlike pkg/topology it does I/O, but only through narrow seams that tests
// replace: the Library interface for NVML (NewNVML is the real one), a sysfs
// root directory, and a unix socket path. Package discoverytest builds all
// three from a topology, and the tests discover every built-in profile back
// from them.
//
// The real NVML adapter uses github.com/NVIDIA/go-nvml, which needs cgo but
// loads libnvidia-ml.so.1 only at Init: binaries start on machines without
// the driver, and Discover then fails with ErrNVMLNotFound.
//
// Files by concern:
//
//	discover.go        Options and Discover, which ties the steps together
//	report.go          Report and per-GPU health
//	report_json.go     the JSON form of a Report
//	nvml.go            the Library and Device interfaces and NVML's value types
//	nvml_gonvml.go     the go-nvml implementation, NewNVML
//	errors.go          NVML return codes as errors, QueryError, ErrNVMLNotFound
//	gpus.go            what NVML and sysfs say about one GPU
//	links.go           the link class and bandwidth of each GPU pair
//	bandwidth.go       NVLink and PCIe bandwidth figures
//	fabric.go          the multi-node NVLink domain from GPU fabric info
//	pci.go             PCI addresses and paths in sysfs
//	infiniband.go      RDMA devices from /sys/class/infiniband
//	nics.go            RDMA devices as topology NICs near their GPUs
//	podresources.go    GPU allocations from the kubelet
//	sanitize.go        reports stripped of identifiers, for fixtures
package discovery
