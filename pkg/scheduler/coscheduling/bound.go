package coscheduling

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling/core"
)

// countLateBindings has the PodGroupManager count members that become bound
// after the pod informer first saw them, as it counts those it first sees
// bound, so a standby scheduler that takes over leadership counts the
// members its predecessor bound.
//
// Coscheduling's Permit lets a gang through once minMember of its pods are
// assigned, counting the pods it let through itself plus those its pod
// informer first saw already bound (an Add with a nodeName). A pod bound by
// another scheduler after the informer first saw it arrives as an Update,
// which the manager ignores. A freshly started scheduler lists every bound
// pod as an Add; a warm standby does not: kube-scheduler starts its
// informers before leader election, so the standby saw the members pending
// and their bindings as Updates. When the leader dies part way through
// binding a gang, the new leader then counts only the members it places
// itself, never reaches minMember, and the gang stays part bound for good
// (each try times out at Permit).
//
// It also stops counting a bound member once it is being deleted, as
// upstream stops once it is gone: a member Terminating on a node that
// stopped answering may stay so for good, and the gang's next incarnation
// (other pod names, the same PodGroup) must reach minMember with pods that
// will run, not with the dead ones.
func countLateBindings(mgr *core.PodGroupManager, pods cache.SharedIndexInformer) error {
	countBound := core.AddPodFactory(mgr)
	_, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, ok := oldObj.(*corev1.Pod)
			pod, ok2 := newObj.(*corev1.Pod)
			switch {
			case !ok || !ok2:
			case pod.DeletionTimestamp != nil:
				if old.DeletionTimestamp == nil && pod.Spec.NodeName != "" {
					mgr.Unreserve(context.Background(), pod)
				}
			case BecameBound(old, pod):
				countBound(pod)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching bindings for %s: %w", Name, err)
	}
	return nil
}

// BecameBound reports whether an update bound the pod to a node.
func BecameBound(old, pod *corev1.Pod) bool {
	return old.Spec.NodeName == "" && pod.Spec.NodeName != ""
}
