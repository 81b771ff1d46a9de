package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/convert"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// demoNamespace holds every demo job.
const demoNamespace = "demo"

// loadOwnExamples reads the TrainingJobs in dir's *.yaml files (documents
// separated by ---) and validates them.
func loadOwnExamples(dir string) ([]*v1alpha1.TrainingJob, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml in %s", dir)
	}
	var jobs []*v1alpha1.TrainingJob
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for i, doc := range bytes.Split(data, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			job := &v1alpha1.TrainingJob{}
			if err := yaml.UnmarshalStrict(doc, job); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", f, i+1, err)
			}
			if job.Name == "" {
				// A comment-only document.
				continue
			}
			if errs := job.Validate(); len(errs) > 0 {
				return nil, fmt.Errorf("%s: %s: %w", f, job.Name, errs.ToAggregate())
			}
			jobs = append(jobs, job)
		}
	}
	return jobs, nil
}

// convertKubeflow converts every Kubeflow manifest in dir with pkg/convert,
// as kubectl lockstep convert does. It returns the jobs and the converter's
// warnings, each prefixed with its file.
func convertKubeflow(dir string) ([]*v1alpha1.TrainingJob, []string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, nil, err
	}
	var jobs []*v1alpha1.TrainingJob
	var warnings []string
	for _, f := range files {
		in, err := os.Open(f)
		if err != nil {
			return nil, nil, err
		}
		res, err := convert.Convert(in)
		in.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("converting %s: %w", f, err)
		}
		for _, c := range res.Jobs {
			jobs = append(jobs, c.Job.DeepCopy())
		}
		for _, w := range res.Warnings {
			warnings = append(warnings, filepath.Base(f)+": "+w)
		}
	}
	return jobs, warnings, nil
}

// intoNamespace moves every job into ns and refuses duplicate names.
func intoNamespace(ns string, jobs []*v1alpha1.TrainingJob) error {
	seen := map[string]bool{}
	for _, j := range jobs {
		j.Namespace = ns
		j.ResourceVersion = ""
		if seen[j.Name] {
			return fmt.Errorf("two example jobs are named %s", j.Name)
		}
		seen[j.Name] = true
	}
	return nil
}

func ensureNamespace(ctx context.Context, c client.Client, ns string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// observe reads the jobs and their pods back. A job is placed when all its
// pods run on nodes and its status.placement is filled; it is held when the
// controller holds it on purpose (Suspended=True: its spec says so, or it
// waits for a queue's admission), which the demo shows with the reason.
func observe(ctx context.Context, c client.Client, submitted []*v1alpha1.TrainingJob) (out []Job, placed, held int, err error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(demoNamespace)); err != nil {
		return nil, 0, 0, err
	}
	byJob := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			byJob[p.Labels[lockstep.LabelJobName]] = append(byJob[p.Labels[lockstep.LabelJobName]], p)
		}
	}
	for _, s := range submitted {
		tj := &v1alpha1.TrainingJob{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), tj); err != nil {
			return nil, 0, 0, err
		}
		j := Job{Name: tj.Namespace + "/" + tj.Name, Framework: string(tj.Spec.Framework)}
		if pl := tj.Status.Placement; pl != nil {
			j.Domain, j.Level, j.Efficiency = pl.Domain, pl.LevelName, pl.Efficiency
		}
		jobPods := byJob[tj.Name]
		sortPods(jobPods)
		running := 0
		for _, p := range jobPods {
			gpus, err := ParseGPUs(p.Annotations[lockstep.AnnotationGPUs])
			if err != nil {
				return nil, 0, 0, fmt.Errorf("pod %s: %w", p.Name, err)
			}
			j.Ranks = append(j.Ranks, Rank{Pod: p.Name, Node: p.Spec.NodeName, GPUs: gpus})
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		switch c := meta.FindStatusCondition(tj.Status.Conditions, string(v1alpha1.JobSuspended)); {
		case c != nil && c.Status == metav1.ConditionTrue && len(jobPods) == 0:
			j.Held = c.Reason + ": " + c.Message
			held++
		case running > 0 && running == len(jobPods) && running >= int(tj.Spec.TotalReplicas()) && tj.Status.Placement != nil && tj.Status.Placement.Domain != "":
			placed++
		}
		out = append(out, j)
	}
	return out, placed, held, nil
}

// sortPods orders a job's pods by role (Master, Chief and Launcher first)
// and then by index, so rank 0 comes first.
func sortPods(pods []corev1.Pod) {
	roleOrder := func(p corev1.Pod) int {
		switch v1alpha1.ReplicaType(p.Labels[lockstep.LabelReplicaType]) {
		case v1alpha1.ReplicaMaster, v1alpha1.ReplicaChief, v1alpha1.ReplicaLauncher:
			return 0
		case v1alpha1.ReplicaWorker:
			return 1
		}
		return 2
	}
	sort.SliceStable(pods, func(a, b int) bool {
		ra, rb := roleOrder(pods[a]), roleOrder(pods[b])
		if ra != rb {
			return ra < rb
		}
		ta, tb := pods[a].Labels[lockstep.LabelReplicaType], pods[b].Labels[lockstep.LabelReplicaType]
		if ta != tb {
			return ta < tb
		}
		ia, _ := strconv.Atoi(pods[a].Labels[lockstep.LabelReplicaIndex])
		ib, _ := strconv.Atoi(pods[b].Labels[lockstep.LabelReplicaIndex])
		if ia != ib {
			return ia < ib
		}
		return pods[a].Name < pods[b].Name
	})
}

// buildTree groups the cluster's nodes by the model's widest level and its
// narrowest (leaf) level.
func buildTree(name string, m *clustermodel.Model, nodes []corev1.Node) Tree {
	leafLabel, topLabel := "", ""
	if len(m.Levels) > 0 {
		leafLabel = m.Levels[0].NodeLabel
		topLabel = m.Levels[len(m.Levels)-1].NodeLabel
	}
	t := Tree{Name: name}
	spineIdx := map[string]int{}
	leafIdx := map[[2]string]int{}
	slices.SortFunc(nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		top, leaf := n.Labels[topLabel], n.Labels[leafLabel]
		if top == "" {
			top = "cluster"
		}
		if leaf == "" {
			leaf = "(no leaf)"
		}
		si, ok := spineIdx[top]
		if !ok {
			si = len(t.Spines)
			spineIdx[top] = si
			t.Spines = append(t.Spines, Spine{Name: top})
		}
		li, ok := leafIdx[[2]string{top, leaf}]
		if !ok {
			li = len(t.Spines[si].Leaves)
			leafIdx[[2]string{top, leaf}] = li
			t.Spines[si].Leaves = append(t.Spines[si].Leaves, Leaf{Name: leaf})
		}
		gpus, _ := strconv.Atoi(n.Labels[lockstep.LabelNVIDIAGPUCount])
		t.Spines[si].Leaves[li].Nodes = append(t.Spines[si].Leaves[li].Nodes, Node{Name: n.Name, GPUs: gpus})
	}
	for si := range t.Spines {
		slices.SortStableFunc(t.Spines[si].Leaves, func(a, b Leaf) int { return naturalCompare(a.Name, b.Name) })
	}
	slices.SortStableFunc(t.Spines, func(a, b Spine) int { return naturalCompare(a.Name, b.Name) })
	return t
}

// naturalCompare orders "leaf-2" before "leaf-10".
func naturalCompare(a, b string) int {
	pa, na := splitNum(a)
	pb, nb := splitNum(b)
	if pa != pb || na < 0 || nb < 0 {
		return strings.Compare(a, b)
	}
	return na - nb
}

func splitNum(s string) (string, int) {
	i := strings.LastIndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	n, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return s, -1
	}
	return s[:i+1], n
}
