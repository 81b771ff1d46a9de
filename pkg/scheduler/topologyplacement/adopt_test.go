package topologyplacement

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// A pod found bound with GPUs the books do not know (a previous leader's,
// or one whose Binding answer was lost and Unreserve forgot) keeps those
// GPUs from other pods until its NodeTopology shows them; pods the books
// know, unbound pods and finished pods are left alone.
func TestAdoptBoundGPUs(t *testing.T) {
	p, _ := newTestPlugin(t)
	bound := func(name, node, gpus string) *v1.Pod {
		pod := utiltesting.MakePod(name, "ns").GPUs(2).Obj()
		pod.UID = types.UID("uid-" + name)
		pod.Spec.NodeName = node
		pod.Annotations = map[string]string{lockstep.AnnotationGPUs: gpus}
		return pod
	}
	p.adoptBoundGPUs(bound("lost", "a", "0,1"))
	finished := bound("done", "a", "2,3")
	finished.Status.Phase = v1.PodSucceeded
	p.adoptBoundGPUs(finished)
	pending := bound("pending", "", "4,5")
	p.adoptBoundGPUs(pending)
	if got, want := p.books.heldOn("a", ""), topology.NewGPUSet(0, 1); got != want {
		t.Errorf("GPUs held on a = %v, want %v (the lost pod's only)", got, want)
	}
	// Known pods keep what the books say.
	p.books.assign("uid-known", "b", topology.NewGPUSet(6, 7))
	known := bound("known", "b", "0,1")
	known.UID = "uid-known"
	p.adoptBoundGPUs(known)
	if got, want := p.books.heldOn("b", ""), topology.NewGPUSet(6, 7); got != want {
		t.Errorf("GPUs held on b = %v, want %v (as assigned)", got, want)
	}
}
