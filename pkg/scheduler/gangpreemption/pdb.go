package gangpreemption

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	policylisters "k8s.io/client-go/listers/policy/v1"
)

// budgets are the PodDisruptionBudgets a preemption weighs, as upstream's
// DefaultPreemption weighs them: a pod's eviction violates a budget whose
// selector matches it once the disruptions the budget allows now are used
// up (by the pods counted before it), except for a pod the budget lists as
// disrupted already.
type budgets struct {
	pdbs      []*policyv1.PodDisruptionBudget
	selectors []labels.Selector
}

// newBudgets reads every budget of lister; none when lister is nil.
func newBudgets(lister policylisters.PodDisruptionBudgetLister) *budgets {
	b := &budgets{}
	if lister == nil {
		return b
	}
	pdbs, err := lister.List(labels.Everything())
	if err != nil {
		return b
	}
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		// A budget whose selector is empty or bad protects nothing, as
		// upstream reads it.
		if err != nil || sel.Empty() {
			continue
		}
		b.pdbs = append(b.pdbs, pdb)
		b.selectors = append(b.selectors, sel)
	}
	return b
}

// violations returns how many of pods (one victim, evicted together) no
// budget allows evicting now, and the budgets they break, as
// "namespace/name", sorted.
func (b *budgets) violations(pods []*v1.Pod) (int, []string) {
	if len(b.pdbs) == 0 {
		return 0, nil
	}
	allowed := make([]int32, len(b.pdbs))
	for i, pdb := range b.pdbs {
		allowed[i] = pdb.Status.DisruptionsAllowed
	}
	n := 0
	var broken []string
	for _, pod := range pods {
		violates := false
		for i, pdb := range b.pdbs {
			if pdb.Namespace != pod.Namespace || !b.selectors[i].Matches(labels.Set(pod.Labels)) {
				continue
			}
			if _, disrupted := pdb.Status.DisruptedPods[pod.Name]; disrupted {
				continue
			}
			allowed[i]--
			if allowed[i] < 0 {
				violates = true
				if name := pdb.Namespace + "/" + pdb.Name; !slices.Contains(broken, name) {
					broken = append(broken, name)
				}
			}
		}
		if violates {
			n++
		}
	}
	slices.Sort(broken)
	return n, broken
}

// BrokenBudgets names the PodDisruptionBudgets evicting pods (one victim)
// breaks, as Candidates counted them.
func (r Reader) BrokenBudgets(pods []*v1.Pod) []string {
	_, broken := newBudgets(r.PDBs).violations(pods)
	return broken
}
