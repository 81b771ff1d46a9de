package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Node labels the agent owns. Everything under lockstep.dev/ that is not in
// this list is left alone.
// Publisher writes a node's NodeTopology and owned labels. It writes only
// what changed, plus a status heartbeat every HeartbeatInterval, so a
// thousand idle nodes cost a thousand writes per interval and nothing more.
type Publisher struct {
	Client            client.Client
	Clock             clock.PassiveClock
	HeartbeatInterval time.Duration
	// Mode is recorded in status.agent: "real" or "fake".
	Mode string
	// Metrics, when set, count publishes and time the last one per node.
	Metrics *Metrics

	// done is set by the first successful publish; Ready reports it.
	done atomic.Bool
}

// Ready is a readiness check: it fails until a NodeTopology was published,
// so a new agent is not ready before the scheduler can see its node.
func (p *Publisher) Ready(*http.Request) error {
	if !p.done.Load() {
		return errors.New("no NodeTopology published yet")
	}
	return nil
}

// Publish makes the node's NodeTopology carry spec and status and returns
// when the next heartbeat is due. status.heartbeatTime is set here.
func (p *Publisher) Publish(ctx context.Context, node *corev1.Node, spec v1alpha1.NodeTopologySpec, status v1alpha1.NodeTopologyStatus) (time.Duration, error) {
	next, wrote, err := p.publish(ctx, node, spec, status)
	if err != nil {
		p.Metrics.publishFailed()
		return 0, err
	}
	p.Metrics.published(node.Name, p.Clock.Now(), wrote)
	p.done.Store(true)
	return next, nil
}

// publish is Publish without the bookkeeping; wrote says whether it wrote
// anything.
func (p *Publisher) publish(ctx context.Context, node *corev1.Node, spec v1alpha1.NodeTopologySpec, status v1alpha1.NodeTopologyStatus) (next time.Duration, wrote bool, err error) {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(node))
	if wrote, err = p.ensureLabels(ctx, node, spec); err != nil {
		return 0, wrote, err
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
	nt := &v1alpha1.NodeTopology{}
	err = p.Client.Get(ctx, client.ObjectKey{Name: node.Name}, nt)
	switch {
	case apierrors.IsNotFound(err):
		nt = &v1alpha1.NodeTopology{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name, OwnerReferences: []metav1.OwnerReference{owner}},
			Spec:       spec,
		}
		if err := p.Client.Create(ctx, nt); err != nil {
			return 0, wrote, fmt.Errorf("creating NodeTopology %s: %w", node.Name, err)
		}
		wrote = true
		logger.V(2).Info("Created NodeTopology", "gpus", spec.GPUCount, "profile", spec.Profile)
	case err != nil:
		return 0, wrote, fmt.Errorf("getting NodeTopology %s: %w", node.Name, err)
	case !apiequality.Semantic.DeepEqual(nt.Spec, spec) || !ownedBy(nt, owner):
		// The hardware changed, or the Node was re-created under the same
		// name: point the owner reference at the new Node so the garbage
		// collector keeps the object.
		nt.Spec = spec
		nt.OwnerReferences = []metav1.OwnerReference{owner}
		if err := p.Client.Update(ctx, nt); err != nil {
			return 0, wrote, fmt.Errorf("updating NodeTopology %s: %w", node.Name, err)
		}
		wrote = true
		logger.V(2).Info("Updated NodeTopology spec", "gpus", spec.GPUCount)
	}

	now := p.Clock.Now()
	age := now.Sub(nt.Status.HeartbeatTime.Time)
	status.Agent = p.Mode
	status.HeartbeatTime = nt.Status.HeartbeatTime
	status.Conditions = withTransitionTimes(nt.Status.Conditions, status.Conditions, now)
	if apiequality.Semantic.DeepEqual(nt.Status, status) && age >= 0 && age < p.HeartbeatInterval {
		return p.HeartbeatInterval - age, wrote, nil
	}
	status.HeartbeatTime = metav1.NewTime(now)
	nt.Status = status
	if err := p.Client.Status().Update(ctx, nt); err != nil {
		return 0, wrote, fmt.Errorf("updating NodeTopology %s status: %w", node.Name, err)
	}
	logger.V(5).Info("Updated NodeTopology status", "free", status.FreeGPUs, "allocations", len(status.Allocations))
	return p.HeartbeatInterval, true, nil
}

func ownedBy(nt *v1alpha1.NodeTopology, owner metav1.OwnerReference) bool {
	for _, ref := range nt.OwnerReferences {
		if ref.Kind == owner.Kind && ref.Name == owner.Name && ref.UID == owner.UID {
			return true
		}
	}
	return false
}

// OwnedLabels returns the values of the node labels the agent owns; a nil
// value means the label must be absent.
func OwnedLabels(spec v1alpha1.NodeTopologySpec) map[string]*string {
	labels := map[string]*string{
		lockstep.LabelGPUProduct:   nil,
		lockstep.LabelGPUCount:     ptr(strconv.Itoa(int(spec.GPUCount))),
		lockstep.LabelNVLinkDomain: nil,
	}
	if product := labelValue(spec.GPUProduct); product != "" {
		labels[lockstep.LabelGPUProduct] = ptr(product)
	}
	if d := spec.NVLinkDomain; d != nil {
		labels[lockstep.LabelNVLinkDomain] = ptr(d.ClusterUUID + "." + strconv.FormatInt(d.CliqueID, 10))
	}
	return labels
}

// ensureLabels patches the owned labels when they differ, touching no other
// label, and reports whether it patched.
func (p *Publisher) ensureLabels(ctx context.Context, node *corev1.Node, spec v1alpha1.NodeTopologySpec) (bool, error) {
	want := OwnedLabels(spec)
	patch := map[string]*string{}
	for k, v := range want {
		have, ok := node.Labels[k]
		if (v == nil && ok) || (v != nil && (!ok || have != *v)) {
			patch[k] = v
		}
	}
	if len(patch) == 0 {
		return false, nil
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": patch}})
	if err != nil {
		return false, err
	}
	if err := p.Client.Patch(ctx, node, client.RawPatch(types.MergePatchType, data)); err != nil {
		return false, fmt.Errorf("labelling node %s: %w", node.Name, err)
	}
	return true, nil
}

// labelValue turns a name such as NVML's "NVIDIA H100 80GB HBM3" into a
// valid label value the way GPU feature discovery does: characters a label
// value cannot hold become '-', and the result is cut to 63 characters.
func labelValue(s string) string {
	out := []byte(s)
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			out[i] = '-'
		}
	}
	if len(out) > validation.LabelValueMaxLength {
		out = out[:validation.LabelValueMaxLength]
	}
	return strings.Trim(string(out), "-_.")
}

func ptr[T any](v T) *T { return &v }
