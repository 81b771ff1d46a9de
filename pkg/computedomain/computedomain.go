// Package computedomain is what Lockstep knows of NVIDIA's ComputeDomain
// API (resource.nvidia.com/v1beta1, github.com/NVIDIA/k8s-dra-driver-gpu):
// the fields of a ComputeDomain the controller writes and reads, and the
// objects NVIDIA's DRA driver makes for one — the channel
// ResourceClaimTemplate its controller writes and the ResourceSlice its
// kubelet plugin publishes per node — for the fake world to reproduce.
//
// The driver's Go module is not served, so the types are mirrored here,
// JSON-compatible with its CRD. They are read and written as unstructured
// objects, as the controller does Kueue's Workloads: the CRD is optional
// (the controller starts without it and watches ComputeDomains once it is
// served), and a write of a mirror keeps the fields the mirror lacks.
package computedomain

import (
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/lockstep-dev/lockstep/pkg/util/mirror"
)

// GroupVersion is the ComputeDomain CRD's served and storage version.
var GroupVersion = schema.GroupVersion{Group: "resource.nvidia.com", Version: "v1beta1"}

// GVK is the ComputeDomain kind; Resource its resource name, for discovery.
var GVK = GroupVersion.WithKind("ComputeDomain")

const Resource = "computedomains"

// Names NVIDIA's driver defines: its DRA driver name, the DeviceClasses its
// chart installs, the device attribute values of its kubelet plugin and the
// opaque configuration its controller puts in a channel claim.
const (
	// DriverName is the compute-domain kubelet plugin's DRA driver.
	DriverName = "compute-domain.nvidia.com"
	// ChannelDeviceClass selects a node's default IMEX channel (id 0);
	// DaemonDeviceClass the per-node IMEX daemon device.
	ChannelDeviceClass = "compute-domain-default-channel.nvidia.com"
	DaemonDeviceClass  = "compute-domain-daemon.nvidia.com"

	// DeviceTypeChannel and DeviceTypeDaemon are the devices' "type"
	// attribute; their "id" attribute numbers them.
	DeviceTypeChannel = "channel"
	DeviceTypeDaemon  = "daemon"
	AttributeType     = "type"
	AttributeID       = "id"

	// ChannelRequest is the request name in the channel claim template.
	ChannelRequest = "channel"
	// ChannelConfigKind is the opaque parameters' kind of a channel claim;
	// its domainID is the ComputeDomain's UID.
	ChannelConfigKind = "ComputeDomainChannelConfig"
	// LabelComputeDomain, valued with the ComputeDomain's UID, marks the
	// objects the driver's controller makes for it.
	LabelComputeDomain = "resource.nvidia.com/computeDomain"
)

// Status values of a ComputeDomain and of its nodes.
const (
	StatusReady    = "Ready"
	StatusNotReady = "NotReady"
	StatusFailed   = "Failed"
)

// AllocationModeSingle asks for one IMEX channel per claim, the default.
const AllocationModeSingle = "Single"

// ComputeDomain mirrors resource.nvidia.com/v1beta1 ComputeDomain: a set of
// nodes prepared (IMEX daemons, channels) for one multi-node NVLink job.
type ComputeDomain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec,omitempty"`
	Status            Status `json:"status,omitempty"`
}

// Spec is immutable in the CRD. NumNodes is the number of nodes whose IMEX
// daemons must be ready for the domain to be Ready (deprecated upstream but
// still what its status is computed from); Channel names the claim template
// the driver's controller creates for the workload's pods.
type Spec struct {
	NumNodes int          `json:"numNodes"`
	Channel  *ChannelSpec `json:"channel"`
}

// ChannelSpec names the ResourceClaimTemplate to create.
type ChannelSpec struct {
	ResourceClaimTemplate ResourceClaimTemplateRef `json:"resourceClaimTemplate"`
	AllocationMode        string                   `json:"allocationMode,omitempty"`
}

// ResourceClaimTemplateRef is the name of the claim template, in the
// ComputeDomain's namespace.
type ResourceClaimTemplateRef struct {
	Name string `json:"name"`
}

// Status is Ready once numNodes nodes are in Nodes with status Ready.
type Status struct {
	Status string `json:"status,omitempty"`
	Nodes  []Node `json:"nodes,omitempty"`
}

// Node is one node that joined the domain: its IMEX daemon's address,
// NVLink clique and readiness.
type Node struct {
	Name      string `json:"name"`
	IPAddress string `json:"ipAddress"`
	CliqueID  string `json:"cliqueID"`
	Index     int    `json:"index"`
	Status    string `json:"status,omitempty"`
}

// Ready says whether the driver reports the domain ready.
func (cd *ComputeDomain) Ready() bool { return cd.Status.Status == StatusReady }

// ReadyNodes counts the nodes whose IMEX daemon is ready.
func (cd *ComputeDomain) ReadyNodes() int {
	n := 0
	for _, node := range cd.Status.Nodes {
		if node.Status == StatusReady {
			n++
		}
	}
	return n
}

// FromUnstructured reads the mirror of a ComputeDomain.
func FromUnstructured(u *unstructured.Unstructured) (*ComputeDomain, error) {
	return mirror.FromUnstructured[ComputeDomain](u)
}

// ToUnstructured is the object to create for a new ComputeDomain: no
// status (the driver writes it) and no creationTimestamp.
func ToUnstructured(cd *ComputeDomain) (*unstructured.Unstructured, error) {
	return mirror.ForCreate(cd, GVK)
}

// NewObject is an empty unstructured ComputeDomain, for reads and watches.
func NewObject() *unstructured.Unstructured { return mirror.NewObject(GVK) }

// NewList is an empty unstructured ComputeDomainList, for lists.
func NewList() *unstructured.UnstructuredList { return mirror.NewList(GVK) }

// ChannelClaimTemplate is the ResourceClaimTemplate NVIDIA's controller
// writes for cd: one request of the default channel class, configured with
// the domain's UID so the kubelet plugin knows which IMEX domain the
// channel belongs to. The driver labels it with the domain's UID and does
// not own it through an owner reference (it deletes it itself, behind a
// finalizer); the fake stand-in owns it instead, for garbage collection.
func ChannelClaimTemplate(cd *ComputeDomain) (*resourcev1.ResourceClaimTemplate, error) {
	if cd.Spec.Channel == nil || cd.Spec.Channel.ResourceClaimTemplate.Name == "" {
		return nil, fmt.Errorf("ComputeDomain %s/%s names no channel resourceClaimTemplate", cd.Namespace, cd.Name)
	}
	params, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&channelConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: ChannelConfigKind},
		DomainID: string(cd.UID),
	})
	if err != nil {
		return nil, err
	}
	raw, err := (&unstructured.Unstructured{Object: params}).MarshalJSON()
	if err != nil {
		return nil, err
	}
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cd.Namespace,
			Name:      cd.Spec.Channel.ResourceClaimTemplate.Name,
			Labels:    map[string]string{LabelComputeDomain: string(cd.UID)},
		},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{
				Name:    ChannelRequest,
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: ChannelDeviceClass},
			}},
			Config: []resourcev1.DeviceClaimConfiguration{{
				Requests: []string{ChannelRequest},
				DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
					Driver:     DriverName,
					Parameters: runtime.RawExtension{Raw: raw},
				}},
			}},
		}}},
	}, nil
}

// channelConfig is the opaque configuration of a channel request.
type channelConfig struct {
	metav1.TypeMeta `json:",inline"`
	DomainID        string `json:"domainID"`
}

// NodeSlice is the ResourceSlice the compute-domain kubelet plugin
// publishes for node: one pool named after the node, in one slice, holding
// the node's default IMEX channel (channel-0; the other 2,047 channels are
// not published per node) and its IMEX daemon device (daemon-0), each with
// a string "type" and an int "id" attribute. generation is the pool's.
func NodeSlice(node string, generation int64) *resourcev1.ResourceSlice {
	device := func(typ string) resourcev1.Device {
		return resourcev1.Device{
			Name: DeviceName(typ, 0),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				AttributeType: {StringValue: &typ},
				AttributeID:   {IntValue: new(int64)},
			},
		}
	}
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + DriverName},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   DriverName,
			NodeName: &node,
			Pool:     resourcev1.ResourcePool{Name: node, Generation: generation, ResourceSliceCount: 1},
			Devices:  []resourcev1.Device{device(DeviceTypeChannel), device(DeviceTypeDaemon)},
		},
	}
}

// ChannelRequests counts the requests of spec for a channel of the default
// channel class (exactly, or as a request's first alternative): how many
// channels a claim made from it takes on its pod's node.
func ChannelRequests(spec *resourcev1.ResourceClaimSpec) int {
	n := 0
	for _, r := range spec.Devices.Requests {
		switch {
		case r.Exactly != nil && r.Exactly.DeviceClassName == ChannelDeviceClass:
			n++
		case len(r.FirstAvailable) > 0 && r.FirstAvailable[0].DeviceClassName == ChannelDeviceClass:
			n++
		}
	}
	return n
}

// DeviceName is the name the kubelet plugin gives the device of type typ
// and id: "channel-0", "daemon-0".
func DeviceName(typ string, id int) string { return fmt.Sprintf("%s-%d", typ, id) }

// IsChannelDevice says whether a device of driver named name is a channel,
// for allocation results, which name devices without their attributes.
func IsChannelDevice(driver, name string) bool {
	return driver == DriverName && strings.HasPrefix(name, DeviceTypeChannel+"-")
}

// IsChannel says whether device, published by driver, is a compute-domain
// channel: the devices of a node's slice that each hold one domain's pod.
func IsChannel(driver string, device *resourcev1.Device) bool {
	if driver != DriverName {
		return false
	}
	a, ok := device.Attributes[AttributeType]
	return ok && a.StringValue != nil && *a.StringValue == DeviceTypeChannel
}
