// Package discoverytest builds what discovery reads, from a topology: a fake
// NVML library (nvml.go), a sysfs tree (sysfs.go) and a kubelet
// pod-resources server (podresources.go). Discovering from them must give
// the topology back, which is how the discovery tests check themselves
// against the built-in profiles; the knobs on each fake inject the failures
// real machines show.
package discoverytest
