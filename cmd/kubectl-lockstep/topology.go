package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	"github.com/lockstep-dev/lockstep/pkg/topology/capacity"
)

const topologyExample = `  # Show the cluster's domain tree with total and free GPUs
  kubectl lockstep topology

  # Only the spines and their leaves
  kubectl lockstep topology --depth 2

  # One line per leaf, for the nodes of one pool
  kubectl lockstep topology --level leaf -l lockstep.dev/pool=h100

  # Levels as the scheduler is configured
  kubectl lockstep topology --topology-config deploy/scheduler/config.yaml -o yaml`

type topologyOptions struct {
	levels   levelFlags
	depth    int
	level    string
	selector string
	output   string
}

func newTopologyCommand(connect connector) *cobra.Command {
	o := topologyOptions{}
	kubeFlags := genericclioptions.NewConfigFlags(true)
	cmd := &cobra.Command{
		Use:   "topology [--level LEVEL | --depth N] [-l SELECTOR]",
		Short: "Show the topology domain tree with free GPUs per domain",
		Long: `Show the cluster's topology domains (cluster, block, spine, leaf, NVLink
clique, node: whichever levels the nodes are labelled for) with the GPUs of
each domain: the total, how many are free, and, where nodes publish a
NodeTopology, how many are unhealthy.

Totals are the nodes' allocatable nvidia.com/gpu. Free is what the Lockstep
scheduler can still place: the total minus the GPUs requested by the
non-terminated pods bound to the node, and never more than the GPUs its
NodeTopology reports healthy and unallocated.

Nodes whose GPUs NVIDIA's DRA driver serves advertise no nvidia.com/gpu:
their total is the GPUs their gpu.nvidia.com ResourceSlices publish (joined
to their NodeTopology's GPUs by UUID), and the GPUs allocated
ResourceClaims hold are taken from it. Without permission to list
ResourceSlices and ResourceClaims such nodes count no GPUs, with a warning.

Levels are node label keys, narrowest first. They default to the
scheduler's defaults (topograph's fabric tiers and GPU feature discovery's
NVLink clique); --levels names others and --topology-config reads them from
the scheduler's configuration file or a TopologyConfig file (see
pkg/lockstep/topologyconfig). Levels no node is labelled for are left
out.`,
		Example: topologyExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validateOutput(o.output); err != nil {
				return err
			}
			if o.level != "" && cmd.Flags().Changed("depth") {
				return errors.New("--level lists one level; it cannot be combined with --depth")
			}
			cfg, err := o.levels.resolve()
			if err != nil {
				return err
			}
			c, err := connect(kubeFlags)
			if err != nil {
				return err
			}
			return runTopology(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), c, cfg.Levels, o)
		},
	}
	kubeFlags.AddFlags(cmd.Flags())
	o.levels.add(cmd)
	cmd.Flags().IntVar(&o.depth, "depth", -1, "show this many levels below the cluster; their GPUs still count above (-1: all)")
	cmd.Flags().StringVar(&o.level, "level", "", "list only the domains of this level (host, a configured level, or cluster)")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "only nodes matching this label selector, e.g. lockstep.dev/pool=h100")
	addOutputFlag(cmd, &o.output)
	return cmd
}

// topologyOutput is what -o json|yaml prints: the levels that exist,
// narrowest first, and the domains (the root with its subtree, or the
// domains of --level).
type topologyOutput struct {
	Levels  []string           `json:"levels"`
	Domains []*capacity.Domain `json:"domains"`
}

func runTopology(ctx context.Context, out, errOut io.Writer, c *cluster, levels []topology.Level, o topologyOptions) error {
	nodes, err := c.core.Nodes().List(ctx, metav1.ListOptions{LabelSelector: o.selector})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	if len(nodes.Items) == 0 {
		if o.selector != "" {
			return fmt.Errorf("no nodes match the selector %q", o.selector)
		}
		return errors.New("the cluster has no nodes")
	}
	// The server filters what it can; filtering again below keeps the count
	// right for servers (and fakes) that ignore field selectors.
	pods, err := c.core.Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
	})
	if err != nil {
		return fmt.Errorf("listing pods to count requested GPUs: %w", err)
	}
	topos, err := c.listNodeTopologies(ctx)
	if err != nil {
		return err
	}
	dra, warning, err := c.listDRAGPUs(ctx, nodes.Items)
	if err != nil {
		return err
	}
	if warning != "" {
		fmt.Fprintln(errOut, warning)
	}
	counted := capacityNodes(nodes.Items, pods.Items, topos)
	dra.count(counted, topos)
	tree, err := capacity.Build(levels, counted)
	if err != nil {
		return fmt.Errorf("building the domain tree: %w", err)
	}

	result := topologyOutput{Levels: tree.Levels}
	if o.level != "" {
		if result.Domains, err = tree.AtLevel(o.level); err != nil {
			return err
		}
	} else {
		result.Domains = []*capacity.Domain{tree.Truncate(o.depth)}
	}
	if o.output != "" {
		return printStructured(out, o.output, result)
	}
	return printTopologyTable(out, result.Domains, o.level == "", tree.Root.Unhealthy != nil)
}

// capacityNodes counts each node's GPUs as the scheduler does on nodes
// whose GPUs NVIDIA's device plugin advertises; draGPUs.count counts those
// of the nodes NVIDIA's DRA driver serves.
func capacityNodes(nodes []corev1.Node, pods []corev1.Pod, topos map[string]*v1alpha1.NodeTopology) []capacity.Node {
	requested := map[string]int{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		// Init containers and overhead count as the scheduler counts them.
		reqs := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		if q, ok := reqs[lockstep.GPUResource]; ok {
			requested[p.Spec.NodeName] += int(q.Value())
		}
	}
	out := make([]capacity.Node, len(nodes))
	for i, n := range nodes {
		alloc := n.Status.Allocatable[lockstep.GPUResource]
		out[i] = capacity.Node{Name: n.Name, Labels: n.Labels, Allocatable: int(alloc.Value()), Requested: requested[n.Name]}
		if nt, ok := topos[n.Name]; ok {
			out[i].Reported = reportedGPUs(nt)
		}
	}
	return out
}

// reportedGPUs reads a NodeTopology the way the scheduler's GPU index does:
// usable GPUs are those neither unhealthy nor allocated.
func reportedGPUs(nt *v1alpha1.NodeTopology) *capacity.Reported {
	usable := topology.AllGPUs(int(nt.Spec.GPUCount))
	var unhealthy topology.GPUSet
	for _, h := range nt.Status.GPUHealth {
		unhealthy |= topology.NewGPUSet(int(h.Index))
	}
	usable &^= unhealthy
	for _, a := range nt.Status.Allocations {
		for _, g := range a.GPUs {
			usable &^= topology.NewGPUSet(int(g))
		}
	}
	return &capacity.Reported{Usable: usable.Len(), Unhealthy: unhealthy.Len()}
}

// printTopologyTable writes the domains as a table: indented by depth as a
// tree, or one line per domain named by its full ID for a single level.
func printTopologyTable(out io.Writer, domains []*capacity.Domain, asTree, unhealthy bool) error {
	w := newTable(out)
	header := "DOMAIN\tNODES\tGPUS\tFREE"
	if unhealthy {
		header += "\tUNHEALTHY"
	}
	fmt.Fprintln(w, header)
	var write func(d *capacity.Domain, depth int)
	write = func(d *capacity.Domain, depth int) {
		name := d.ID
		if asTree && d.Level != lockstep.LevelCluster {
			name = strings.Repeat("  ", depth) + d.Level + "=" + d.Name
		}
		row := []string{name, strconv.Itoa(d.Nodes), strconv.Itoa(d.GPUs), strconv.Itoa(d.Free)}
		if unhealthy {
			u := none
			if d.Unhealthy != nil {
				u = strconv.Itoa(*d.Unhealthy)
			}
			row = append(row, u)
		}
		fmt.Fprintln(w, strings.Join(row, "\t"))
		for _, c := range d.Children {
			write(c, depth+1)
		}
	}
	for _, d := range domains {
		write(d, 0)
	}
	return w.Flush()
}
