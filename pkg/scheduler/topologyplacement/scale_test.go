package topologyplacement

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	utiltesting "github.com/lockstep-dev/lockstep/pkg/util/testing"
)

// BenchmarkPreFilterGangMember measures PreFilter of one member of a
// planned gang of 1,024 ranked 8-GPU members on 1,024 HGX nodes (32 per
// leaf): what each member after the first spends before Filter, the plan
// being reused. Each op is a different member, sent to its rank's node.
func BenchmarkPreFilterGangMember(b *testing.B) {
	const members = 1024
	ctx := context.Background()
	p := rankedGangOnLeaves(b, members)
	if _, status := p.PreFilter(ctx, framework.NewCycleState(), p.pods[0], p.nodes); !status.IsSuccess() {
		b.Fatalf("planning the gang: %v", status)
	}
	p.gangs.ForgetSteer(p.pods[0].UID)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		pod := p.pods[i%members]
		result, status := p.PreFilter(ctx, framework.NewCycleState(), pod, p.nodes)
		if !status.IsSuccess() || result.NodeNames.Len() != 1 {
			b.Fatalf("PreFilter %s: %v, %d nodes; want its rank's node", pod.Name, status, result.NodeNames.Len())
		}
		// Each member is steered to its rank's node afresh.
		p.gangs.ForgetSteer(pod.UID)
		i++
	}
}

// BenchmarkPlanMembers measures what a plan reads of its gang's pods
// (classMembers and pendingPeers) for a gang of 1,024 8-GPU members alone
// in its namespace (namespace=1024) or beside 12,976 pods of other gangs
// (namespace=14000), as in the scale run's mixed burst.
func BenchmarkPlanMembers(b *testing.B) {
	const members = 1024
	for _, others := range []int{0, 12_976} {
		b.Run(fmt.Sprintf("namespace=%d", members+others), func(b *testing.B) {
			p := newMetricsPlugin(b, members, true, nil)
			store := p.handle.SharedInformerFactory().Core().V1().Pods().Informer().GetIndexer()
			for i := range others {
				pod := utiltesting.MakePod(fmt.Sprintf("o-%d", i), "ns").GPUs(1).PodGroup(fmt.Sprintf("o-%d", i/8)).Obj()
				pod.UID = types.UID("uid-" + pod.Name)
				if err := store.Add(pod); err != nil {
					b.Fatal(err)
				}
			}
			pod := p.pods[0]
			notInPlan := func(types.UID) bool { return false }
			b.ReportAllocs()
			for b.Loop() {
				if m := p.gangs.ClassMembers(pod, 8); m.Total != members {
					b.Fatalf("classMembers counted %d members, want %d", m.Total, members)
				}
				if peers, err := p.gangs.PendingPeers(pod, 8, notInPlan); err != nil || len(peers) != members-1 {
					b.Fatalf("pendingPeers: %d peers (%v), want %d", len(peers), err, members-1)
				}
			}
		})
	}
}
