package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/capacity"
)

// placementReport is where a job's pods run: what `placement` prints, and
// its -o json|yaml form.
type placementReport struct {
	Namespace string             `json:"namespace"`
	Job       string             `json:"job"`
	Framework v1alpha1.Framework `json:"framework"`
	State     v1alpha1.JobState  `json:"state,omitempty"`
	// Levels name the domain columns, narrowest first: the configured
	// levels some node is labelled for.
	Levels []string `json:"levels"`
	// Placement is the job's status.placement, as the controller recorded it.
	Placement *v1alpha1.Placement `json:"placement,omitempty"`
	// Rating is the placement rated here, with topology.Rater.Rate (the
	// function the controller and scheduler use) on the pods' nodes and
	// GPUs and the topology configuration given: what status.placement and
	// the PodGroup should say.
	Rating   *placementRating `json:"rating,omitempty"`
	PodGroup *podGroupSummary `json:"podGroup,omitempty"`
	Ranks    []rankRow        `json:"ranks"`
}

// podGroupSummary is the topology constraint the controller wrote on the
// job's PodGroup and the placement the scheduler wrote back.
type podGroupSummary struct {
	Name                string `json:"name"`
	ConstraintLevel     string `json:"constraintLevel,omitempty"`
	ConstraintMode      string `json:"constraintMode,omitempty"`
	PlacementDomain     string `json:"placementDomain,omitempty"`
	PlacementLevel      string `json:"placementLevel,omitempty"`
	PlacementEfficiency string `json:"placementEfficiency,omitempty"`
}

func summarizePodGroup(name string, annotations map[string]string) *podGroupSummary {
	return &podGroupSummary{
		Name:                name,
		ConstraintLevel:     annotations[lockstep.AnnotationTopologyLevel],
		ConstraintMode:      annotations[lockstep.AnnotationTopologyMode],
		PlacementDomain:     annotations[lockstep.AnnotationPlacementDomain],
		PlacementLevel:      annotations[lockstep.AnnotationPlacementLevel],
		PlacementEfficiency: annotations[lockstep.AnnotationPlacementEfficiency],
	}
}

// rankRow is one pod of the job.
type rankRow struct {
	// Rank is the pod's place in the gang: roles in the framework's order
	// (v1alpha1.FrameworkRoles: Master, Chief or Launcher first), then
	// index; for PyTorch and XGBoost the RANK the pod is given, for MPI
	// its hostfile line. Nil for a pod whose role or index the spec lacks.
	Rank  *int32               `json:"rank,omitempty"`
	Role  v1alpha1.ReplicaType `json:"role"`
	Index *int32               `json:"index,omitempty"`
	Pod   string               `json:"pod"`
	Phase string               `json:"phase"`
	Node  string               `json:"node,omitempty"`
	// GPUs are the pod's GPU indices, "0,1"; GPUSource says where they were
	// read: the lockstep.dev/gpus annotation or, without one, the node's
	// NodeTopology allocation.
	GPUs      string `json:"gpus,omitempty"`
	GPUSource string `json:"gpuSource,omitempty"`
	// Devices are the DRA devices the pod's claims were allocated,
	// "<driver>/<pool>/<device>", as the job's status.placement records
	// them.
	Devices []string `json:"devices,omitempty"`
	// Domains are the node's domains, narrowest first, one per level.
	Domains []domainRef `json:"domains,omitempty"`
}

// placementRating is a topology.Rating as the report shows it.
type placementRating struct {
	Domain           string `json:"domain,omitempty"`
	LevelName        string `json:"levelName,omitempty"`
	LevelsSpanned    int    `json:"levelsSpanned"`
	BusBandwidthMBps int64  `json:"busBandwidthMBps,omitempty"`
	Efficiency       string `json:"efficiency,omitempty"`
	Reason           string `json:"reason,omitempty"`
	// Unrated says why the placement could not be rated here.
	Unrated string `json:"unrated,omitempty"`
}

// ratePlacement rates the report's placement with topology.Rater.Rate on
// the domain tree of nodes under cfg, as the controller does: node profiles
// from their labels (else their NodeTopology's), each node's GPUs the union
// of its pods'.
func ratePlacement(cfg lockstep.TopologyConfig, nodes []corev1.Node, topos map[string]*v1alpha1.NodeTopology, ranks []rankRow) *placementRating {
	gpus := map[string]topology.GPUSet{}
	var names []string
	for _, r := range ranks {
		if r.Node == "" {
			return &placementRating{Unrated: "pod " + r.Pod + " is not bound yet"}
		}
		set, err := topology.ParseGPUList(r.GPUs)
		if err != nil || set == 0 {
			return &placementRating{Unrated: "pod " + r.Pod + " has no known GPU set"}
		}
		if _, seen := gpus[r.Node]; !seen {
			names = append(names, r.Node)
		}
		gpus[r.Node] |= set
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	labelled := make([]topology.NodeLabels, len(nodes))
	profiles := make(map[string]string, len(nodes))
	for i, n := range nodes {
		labelled[i] = topology.NodeLabels{Name: n.Name, Labels: n.Labels}
		if p, ok := topology.ProfileFromLabels(n.Labels); ok {
			profiles[n.Name] = p.Name
		} else if nt := topos[n.Name]; nt != nil {
			profiles[n.Name] = nt.Spec.Profile
		}
	}
	tree, err := topology.NewTree(cfg.Levels, labelled)
	if err != nil {
		return &placementRating{Unrated: "building the domain tree: " + err.Error()}
	}
	rater, err := topology.NewRater(cfg, tree, func(n string) string { return profiles[n] }, topology.DefaultMessageBytes)
	if err != nil {
		return &placementRating{Unrated: err.Error()}
	}
	members := make([]topology.Member, len(names))
	for i, n := range names {
		path := tree.Path(n)
		if path == nil {
			return &placementRating{Unrated: "node " + n + " is not in the cluster"}
		}
		nt := topos[n]
		if nt == nil {
			return &placementRating{Unrated: "node " + n + " has no NodeTopology"}
		}
		hw, err := nt.Spec.ToTopology()
		if err != nil {
			return &placementRating{Unrated: "NodeTopology " + n + ": " + err.Error()}
		}
		members[i] = topology.Member{Node: hw, GPUs: gpus[n], Path: path}
	}
	rating, err := rater.Rate(members)
	if err != nil {
		return &placementRating{Unrated: err.Error()}
	}
	return &placementRating{
		Domain:           rating.Domain.DisplayID(),
		LevelName:        rating.LevelName,
		LevelsSpanned:    rating.LevelsSpanned,
		BusBandwidthMBps: int64(rating.Actual.BottleneckGBps * 1000),
		Efficiency:       lockstep.FormatEfficiency(rating.Efficiency),
		Reason:           rating.Reason,
	}
}

type domainRef struct {
	Level string `json:"level"`
	Name  string `json:"name"`
	ID    string `json:"id"`
}

const (
	gpuSourceAnnotation = "annotation"
	gpuSourceAllocation = "allocation"
)

// buildPlacementReport describes a job's pods. tree holds the cluster's
// nodes, topos the NodeTopologies by node name.
func buildPlacementReport(job *v1alpha1.TrainingJob, pods []corev1.Pod, tree *capacity.Tree, topos map[string]*v1alpha1.NodeTopology) placementReport {
	report := placementReport{
		Namespace: job.Namespace,
		Job:       job.Name,
		Framework: job.Spec.Framework,
		State:     job.Status.State,
		Placement: job.Status.Placement,
		Ranks:     make([]rankRow, 0, len(pods)),
	}
	for _, l := range tree.Levels {
		if l != lockstep.LevelHost && l != lockstep.LevelCluster {
			report.Levels = append(report.Levels, l)
		}
	}
	first := rankOffsets(job)
	devices := map[string][]string{}
	if pl := job.Status.Placement; pl != nil {
		for _, d := range pl.Devices {
			devices[d.Pod] = d.Devices
		}
	}
	for i := range pods {
		p := &pods[i]
		row := rankRow{Role: v1alpha1.ReplicaType(p.Labels[lockstep.LabelReplicaType]), Pod: p.Name, Phase: string(p.Status.Phase), Node: p.Spec.NodeName}
		if p.DeletionTimestamp != nil {
			row.Phase = "Terminating"
		}
		if i, err := strconv.ParseInt(p.Labels[lockstep.LabelReplicaIndex], 10, 32); err == nil {
			index := int32(i)
			row.Index = &index
			spec := job.Spec.ReplicaSpecs[row.Role]
			if offset, ok := first[row.Role]; ok && index >= 0 && index < spec.DesiredReplicas() {
				rank := offset + index
				row.Rank = &rank
			}
		}
		row.GPUs, row.GPUSource = podGPUs(p, topos[p.Spec.NodeName])
		row.Devices = devices[p.Name]
		for _, d := range tree.Path(p.Spec.NodeName) {
			if d.Level != lockstep.LevelHost && d.Level != lockstep.LevelCluster {
				row.Domains = append(row.Domains, domainRef{Level: d.Level, Name: d.Name, ID: d.ID})
			}
		}
		report.Ranks = append(report.Ranks, row)
	}
	slices.SortFunc(report.Ranks, func(a, b rankRow) int {
		if (a.Rank == nil) != (b.Rank == nil) {
			if a.Rank == nil {
				return 1
			}
			return -1
		}
		if a.Rank != nil && *a.Rank != *b.Rank {
			return cmp.Compare(*a.Rank, *b.Rank)
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	return report
}

// rankOffsets returns the rank of index 0 of each role of the job.
func rankOffsets(job *v1alpha1.TrainingJob) map[v1alpha1.ReplicaType]int32 {
	first := map[v1alpha1.ReplicaType]int32{}
	var next int32
	for _, role := range v1alpha1.FrameworkRoles(job.Spec.Framework) {
		spec, ok := job.Spec.ReplicaSpecs[role]
		if !ok {
			continue
		}
		first[role] = next
		next += spec.DesiredReplicas()
	}
	return first
}

// podGPUs returns a pod's GPU indices: what the node's NodeTopology says
// the pod holds, else the scheduler's annotation. The agent's word comes
// first, as in the controller's summary: it is what the node gave the pod
// (a DRA pod's claims, a device plugin that chose for itself).
func podGPUs(p *corev1.Pod, nt *v1alpha1.NodeTopology) (string, string) {
	if nt != nil {
		for _, a := range nt.Status.Allocations {
			// By UID: after a gang restart the agent may still list the
			// old pod of the same name.
			if a.PodUID == string(p.UID) {
				var set topology.GPUSet
				for _, g := range a.GPUs {
					set |= topology.NewGPUSet(int(g))
				}
				return set.List(), gpuSourceAllocation
			}
		}
	}
	if list, ok := p.Annotations[lockstep.AnnotationGPUs]; ok && list != "" {
		if set, err := topology.ParseGPUList(list); err == nil {
			list = set.List()
		}
		return list, gpuSourceAnnotation
	}
	return "", ""
}

// formatDevices writes a pod's DRA devices compactly, by driver, e.g.
// "gpu.nvidia.com: gpu-4,gpu-5; compute-domain.nvidia.com: channel-0": the
// pool is left out where it is the pod's node, as NVIDIA's drivers name
// their pools.
func formatDevices(node string, devices []string) string {
	var groups []string
	byGroup := map[string][]string{}
	for _, d := range devices {
		group, device := d, ""
		if i := strings.LastIndex(d, "/"); i >= 0 {
			group, device = d[:i], d[i+1:]
		}
		if driver, pool, ok := strings.Cut(group, "/"); ok && pool == node {
			group = driver
		}
		if _, ok := byGroup[group]; !ok {
			groups = append(groups, group)
		}
		byGroup[group] = append(byGroup[group], device)
	}
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = g
		// A name with no driver or pool is printed as it is.
		if names := strings.Join(byGroup[g], ","); names != "" {
			out[i] += ": " + names
		}
	}
	return strings.Join(out, "; ")
}

// printPlacementReport writes the job's summary and then one line per pod.
func printPlacementReport(out io.Writer, r placementReport) error {
	w := newTable(out)
	fmt.Fprintf(w, "TrainingJob:\t%s/%s\n", r.Namespace, r.Job)
	fmt.Fprintf(w, "Framework:\t%s\n", r.Framework)
	fmt.Fprintf(w, "State:\t%s\n", orNone(string(r.State)))
	if p := r.Placement; p != nil {
		fmt.Fprintf(w, "Placement:\t%s (level %s, %d nodes)\n", orNone(p.Domain), orNone(p.LevelName), len(p.Nodes))
		fmt.Fprintf(w, "Levels spanned:\t%d\n", p.LevelsSpanned)
		bw := none
		if p.BusBandwidthMBps > 0 {
			bw = fmt.Sprintf("%.1f GB/s (modelled all-reduce bus bandwidth)", float64(p.BusBandwidthMBps)/1000)
		}
		fmt.Fprintf(w, "Bus bandwidth:\t%s\n", bw)
		fmt.Fprintf(w, "Efficiency:\t%s\n", orNone(p.Efficiency))
		if p.Reason != "" {
			fmt.Fprintf(w, "  Why:\t%s\n", p.Reason)
		}
		if cd := p.ComputeDomain; cd != nil {
			ready := "not ready: see the job's ComputeDomainReady condition"
			if cd.Ready {
				ready = "ready"
			}
			fmt.Fprintf(w, "ComputeDomain:\t%s (%s)\n", cd.Name, ready)
		}
	} else {
		fmt.Fprintf(w, "Placement:\t%s (not recorded yet)\n", none)
	}
	if rt := r.Rating; rt != nil {
		if rt.Unrated != "" {
			fmt.Fprintf(w, "Rated here:\t%s (%s)\n", none, rt.Unrated)
		} else {
			agree := "status agrees"
			if p := r.Placement; p == nil || p.Efficiency != rt.Efficiency || p.Domain != rt.Domain {
				agree = "status differs"
			}
			fmt.Fprintf(w, "Rated here:\t%s in %s, %d levels spanned (%s)\n", orNone(rt.Efficiency), rt.Domain, rt.LevelsSpanned, agree)
			fmt.Fprintf(w, "  Why:\t%s\n", rt.Reason)
		}
	}
	if pg := r.PodGroup; pg != nil {
		constraint := none
		if pg.ConstraintLevel != "" {
			constraint = pg.ConstraintLevel + " (" + orDefault(pg.ConstraintMode, "scheduler's default mode") + ")"
		}
		fmt.Fprintf(w, "PodGroup:\t%s\n", pg.Name)
		fmt.Fprintf(w, "  Constraint:\t%s\n", constraint)
		fmt.Fprintf(w, "  Placed in:\t%s (level %s, efficiency %s)\n", orNone(pg.PlacementDomain), orNone(pg.PlacementLevel), orNone(pg.PlacementEfficiency))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)

	w = newTable(out)
	header := []string{"RANK", "POD", "ROLE", "STATUS", "NODE", "GPUS"}
	for _, l := range r.Levels {
		header = append(header, strings.ToUpper(l))
	}
	// Only a job with DRA devices gets the column: last, as it is wide.
	withDevices := slices.ContainsFunc(r.Ranks, func(row rankRow) bool { return len(row.Devices) > 0 })
	if withDevices {
		header = append(header, "DEVICES")
	}
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, row := range r.Ranks {
		rank := "-"
		if row.Rank != nil {
			rank = strconv.Itoa(int(*row.Rank))
		}
		cells := []string{rank, row.Pod, orNone(string(row.Role)), orNone(row.Phase), orNone(row.Node), orNone(row.GPUs)}
		byLevel := map[string]string{}
		for _, d := range row.Domains {
			byLevel[d.Level] = d.Name
		}
		for _, l := range r.Levels {
			cells = append(cells, orNone(byLevel[l]))
		}
		if withDevices {
			cells = append(cells, orNone(formatDevices(row.Node, row.Devices)))
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	return w.Flush()
}

func orNone(s string) string { return orDefault(s, none) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
