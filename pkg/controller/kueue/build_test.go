package kueue

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// testJob is a job of one Master and workers Workers, framework unset.
func testJob(workers int32) *utiltesting.TrainingJobWrapper {
	tpl := utiltesting.MakePodTemplate("pytorch").Image("img").Obj()
	return utiltesting.MakeTrainingJob("j", "ns").UID("uid").
		Role(v1alpha1.ReplicaMaster, 1, tpl).Role(v1alpha1.ReplicaWorker, workers, tpl)
}

// TestWantedWorkload: one pod set per role, the queue and priority, owned
// by the job; the hash (name and annotation) changes with the spec only,
// and the object survives the trip through unstructured.
func TestWantedWorkload(t *testing.T) {
	w, err := WantedWorkload(testJob(3).Obj(), "lq", &Priority{ClassName: "high", Value: 100})
	if err != nil {
		t.Fatal(err)
	}
	type podSet struct {
		Name  string
		Count int32
	}
	var sets []podSet
	for _, ps := range w.Spec.PodSets {
		sets = append(sets, podSet{ps.Name, ps.Count})
	}
	if diff := cmp.Diff([]podSet{{"master", 1}, {"worker", 3}}, sets); diff != "" {
		t.Errorf("pod sets (-want,+got):\n%s", diff)
	}
	if w.Spec.QueueName != "lq" || ptr.Deref(w.Spec.Priority, 0) != 100 || w.Spec.PriorityClassRef.Name != "high" {
		t.Errorf("spec %+v, want queue lq, priority 100 of high", w.Spec)
	}
	ref := metav1.GetControllerOf(w)
	if ref == nil || ref.Kind != "TrainingJob" || ref.UID != "uid" || w.Labels[lockstep.LabelJobName] != "j" || w.Labels[lockstep.LabelKueueJobUID] != "uid" {
		t.Errorf("owner %+v labels %v, want controlled by TrainingJob j and labelled", ref, w.Labels)
	}
	hash := w.Annotations[lockstep.AnnotationSpecHash]
	if !strings.HasSuffix(w.Name, "-"+hash) || !strings.HasPrefix(w.Name, "trainingjob-j-") {
		t.Errorf("name %s, want trainingjob-j-%s", w.Name, hash)
	}
	again, _ := WantedWorkload(testJob(3).Obj(), "lq", &Priority{ClassName: "high", Value: 100})
	other, _ := WantedWorkload(testJob(4).Obj(), "lq", &Priority{ClassName: "high", Value: 100})
	if again.Name != w.Name || other.Name == w.Name {
		t.Errorf("names %s, %s (same spec), %s (more workers): want the hash to follow the spec", w.Name, again.Name, other.Name)
	}

	u, err := ToUnstructured(w)
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != "kueue.x-k8s.io/v1beta2" || u.GetKind() != "Workload" {
		t.Errorf("apiVersion/kind %s/%s", u.GetAPIVersion(), u.GetKind())
	}
	back, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w.Spec, back.Spec); diff != "" {
		t.Errorf("round trip (-want,+got):\n%s", diff)
	}
	long := testJob(1).Obj()
	long.Name = strings.Repeat("a", 260)
	lw, _ := WantedWorkload(long, "lq", nil)
	if len(lw.Name) > 253 {
		t.Errorf("name of %d characters, want at most 253", len(lw.Name))
	}
}

// TestWantedWorkloadElastic: an elastic job's hash leaves the Worker count
// out (a resize is a slice of the same Workload, not a new spec) but not
// the rest of the spec; its Workloads are marked elastic, carry the
// counts, and are named after the generation too, one per scale-up.
func TestWantedWorkloadElastic(t *testing.T) {
	elastic := func(workers int32, gen int64) *v1alpha1.TrainingJob {
		return testJob(workers).Generation(gen).
			ElasticPolicy(v1alpha1.ElasticPolicy{MinReplicas: ptr.To[int32](1), MaxReplicas: ptr.To[int32](8)}).Obj()
	}
	w2, _ := WantedWorkload(elastic(2, 1), "lq", nil)
	w4, _ := WantedWorkload(elastic(4, 2), "lq", nil)
	hash := w2.Annotations[lockstep.AnnotationSpecHash]
	if w4.Annotations[lockstep.AnnotationSpecHash] != hash {
		t.Errorf("hashes %s (2 Workers), %s (4 Workers): want the Worker count out of an elastic job's hash", hash, w4.Annotations[lockstep.AnnotationSpecHash])
	}
	if diff := cmp.Diff(map[string]int32{"master": 1, "worker": 4}, w4.Counts()); diff != "" {
		t.Errorf("counts (-want,+got):\n%s", diff)
	}
	if w2.Name != "trainingjob-j-"+hash+"-1" || w4.Name != "trainingjob-j-"+hash+"-2" {
		t.Errorf("names %s, %s: want trainingjob-j-%s-<generation>", w2.Name, w4.Name, hash)
	}
	if w2.Annotations[lockstep.AnnotationKueueElasticJob] != "true" {
		t.Errorf("annotations %v, want %s=true", w2.Annotations, lockstep.AnnotationKueueElasticJob)
	}
	masters := elastic(2, 1)
	rs := masters.Spec.ReplicaSpecs[v1alpha1.ReplicaMaster]
	rs.Template = *rs.Template.DeepCopy()
	rs.Template.Spec.Containers[0].Image = "other"
	masters.Spec.ReplicaSpecs[v1alpha1.ReplicaMaster] = rs
	other, _ := WantedWorkload(masters, "lq", nil)
	if other.Annotations[lockstep.AnnotationSpecHash] == hash {
		t.Errorf("a new Master template kept hash %s: only the Worker count is left out", hash)
	}
	plain, _ := WantedWorkload(testJob(2).Obj(), "lq", nil)
	if _, ok := plain.Annotations[lockstep.AnnotationKueueElasticJob]; ok || plain.Annotations[lockstep.AnnotationSpecHash] == hash {
		t.Errorf("a job without elasticPolicy: annotations %v, want no slice marking and the counts in the hash", plain.Annotations)
	}
}
