package gangmanager

import (
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
)

// GangKey returns namespace/podgroup for a pod in a PodGroup, or "".
func GangKey(pod *v1.Pod) string {
	name := pod.Labels[schedv1alpha1.PodGroupLabel]
	if name == "" {
		return ""
	}
	return pod.Namespace + "/" + name
}

// PlanKey names the plan a pod asking for gpus GPUs takes a slot of: its
// gang's members that ask for the same number ("namespace/podgroup#8").
// Gangs mix sizes (a TensorFlow parameter server asks for none, a chief
// for fewer than the workers), while a plan places identical members. ""
// for pods outside gangs and pods that ask for no GPUs: those are
// scheduled as usual. The count is the caller's (nodeview.View.Request):
// GPUs asked through ResourceClaims count as those through nvidia.com/gpu.
func PlanKey(pod *v1.Pod, gpus int) string {
	gang := GangKey(pod)
	if gang == "" || gpus == 0 {
		return ""
	}
	return gang + "#" + strconv.Itoa(gpus)
}

// SplitPlanKey returns the namespace and PodGroup name of a plan key.
func SplitPlanKey(key string) (namespace, podGroup string, ok bool) {
	return strings.Cut(GangOf(key), "/")
}

// GangOf is the gang (namespace/podgroup) of a plan key.
func GangOf(key string) string {
	gang, _, _ := strings.Cut(key, "#")
	return gang
}
