package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
)

const (
	leafKey   = lockstep.LabelFabricTier0
	spineKey  = lockstep.LabelFabricTier1
	cliqueKey = lockstep.LabelGPUClique
)

// t0 is the start of every hand-built run.
var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// at returns t0 plus seconds.
func at(seconds float64) time.Time {
	return t0.Add(time.Duration(seconds * float64(time.Second)))
}

// hgxCluster is nodes HGX H100 nodes named n00, n01, … with perLeaf nodes per
// leaf (leaf-0, leaf-1, …) under one spine oversubscribed by spineOver.
func hgxCluster(nodes, perLeaf int, spineOver float64) Cluster {
	c := Cluster{
		Name: "test",
		Levels: []topology.Level{
			{Name: "leaf", LabelKey: leafKey},
			{Name: "spine", LabelKey: spineKey},
		},
		Fabric: topology.Fabric{Oversubscription: map[string]float64{"spine": spineOver}},
	}
	for i := range nodes {
		c.Nodes = append(c.Nodes, Node{
			Name:    fmt.Sprintf("n%02d", i),
			Profile: "hgx-h100",
			Labels:  map[string]string{leafKey: fmt.Sprintf("leaf-%d", i/perLeaf), spineKey: "spine-0"},
		})
	}
	return c
}

// gb200Cluster is two NVL72 racks of 18 trays (r0-00…, r1-00…), one clique
// and one leaf per rack, under one spine, with an optional clique level.
func gb200Cluster() Cluster {
	c := Cluster{
		Name: "gb200",
		Levels: []topology.Level{
			{Name: "clique", LabelKey: cliqueKey, NVLink: true},
			{Name: "leaf", LabelKey: leafKey},
			{Name: "spine", LabelKey: spineKey},
		},
	}
	for r := range 2 {
		for i := range 18 {
			c.Nodes = append(c.Nodes, Node{
				Name:    fmt.Sprintf("r%d-%02d", r, i),
				Profile: "gb200-nvl72",
				Labels: map[string]string{
					cliqueKey: fmt.Sprintf("rack-%d.1", r), leafKey: fmt.Sprintf("leaf-%d", r), spineKey: "spine-0",
				},
			})
		}
	}
	return c
}

// pod is a pod bound at bound seconds on node with GPUs; finished 0 means
// not finished.
func pod(name, node string, gpus topology.GPUSet, bound, finished float64) PodRun {
	p := PodRun{Name: name, Node: node, GPUs: gpus, Bound: at(bound)}
	if finished > 0 {
		p.Finished = at(finished)
	}
	return p
}

// unbound is a pod that was never bound.
func unbound(name string) PodRun { return PodRun{Name: name} }

var all8 = topology.AllGPUs(8)

func ptr[T any](v T) *T { return &v }

// mustNoError fails the test on err.
func mustNoError(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
