package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/lockstep-dev/lockstep/pkg/fabric"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// Defaults match the label keys Lockstep's topology levels read by default
// (pkg/lockstep): topograph's fabric tiers, numbered from 1 at the leaf.
var defaultLevelKeys = []string{
	lockstep.LabelFabricTier0,
	lockstep.LabelFabricTier1,
	lockstep.LabelFabricTier2,
}

const (
	defaultAcceleratorKey = "accelerator.topograph.run/domain"
	// fieldManager names this tool in the nodes' managed fields.
	fieldManager = "lockstep-fabric-import"
)

type options struct {
	ibnetdiscoverPath string
	topographPath     string
	// levelKeys are the node label keys for tiers 1, 2, 3, ...
	levelKeys      []string
	acceleratorKey string
	kubeconfig     string
	dryRun         bool
	naming         nodeNaming
}

func (o options) validate() error {
	if (o.ibnetdiscoverPath == "") == (o.topographPath == "") {
		return errors.New("give exactly one of --ibnetdiscover and --topograph")
	}
	if len(o.levelKeys) == 0 {
		return errors.New("--level-keys is empty")
	}
	keys := slices.Clone(o.levelKeys)
	if o.acceleratorKey != "" {
		keys = append(keys, o.acceleratorKey)
	}
	seen := make(map[string]bool)
	for _, key := range keys {
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return fmt.Errorf("label key %q: %s", key, strings.Join(errs, "; "))
		}
		if seen[key] {
			return fmt.Errorf("label key %q is given twice across --level-keys and --accelerator-key", key)
		}
		seen[key] = true
	}
	return nil
}

// nodeNaming turns a host name from the fabric into a node name. Kubelet
// registers a node under its lowercased host name, so names are lowercased
// first; then the domain is stripped and the suffix appended, as asked.
type nodeNaming struct {
	stripDomain bool
	suffix      string
}

func (n nodeNaming) nodeName(host string) (string, error) {
	name := strings.ToLower(host)
	if n.stripDomain {
		name, _, _ = strings.Cut(name, ".")
	}
	name += n.suffix
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("%q is not a valid node name: %s", name, strings.Join(errs, "; "))
	}
	return name, nil
}

type label struct{ key, value string }

// nodeLabels are the labels planned for one node.
type nodeLabels struct {
	node, host string
	labels     []label
}

// run reads the fabric, plans each node's labels, and prints them (dry run)
// or patches the nodes through the client that connect returns.
func run(ctx context.Context, opts options, out io.Writer, connect func(kubeconfig string) (kubernetes.Interface, error)) error {
	if err := opts.validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	topo, err := readTopology(opts)
	if err != nil {
		return err
	}
	for _, w := range topo.Warnings {
		logger.Info("Input left out", "detail", w)
	}
	logger.V(2).Info("Fabric read", "hosts", len(topo.Assignments), "tiers", topo.Depth)
	if topo.Depth > len(opts.levelKeys) {
		logger.Info("The fabric has more tiers than --level-keys; the outer tiers are not labelled", "tiers", topo.Depth, "levelKeys", len(opts.levelKeys))
	}
	plan, err := planLabels(ctx, topo, opts)
	if err != nil {
		return err
	}
	if opts.dryRun {
		return writePlan(out, plan)
	}
	client, err := connect(opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("connecting to the cluster: %w", err)
	}
	return applyPlan(ctx, client, plan)
}

func readTopology(opts options) (*fabric.Topology, error) {
	path := opts.ibnetdiscoverPath
	if path == "" {
		path = opts.topographPath
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if opts.topographPath != "" {
		topo, err := fabric.ParseTopograph(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return topo, nil
	}
	fab, err := fabric.ParseIBNetDiscover(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return fab.Topology(fabric.Options{}), nil
}

// planLabels gives every host with domains one label per level key. Level
// keys beyond the host's domains get its widest domain: a host whose part of
// the fabric has no tier 3 is alone with its tier-2 peers at tier 3 too, and
// schedulers that skip nodes missing a level's label keep the node.
func planLabels(ctx context.Context, topo *fabric.Topology, opts options) ([]nodeLabels, error) {
	logger := klog.FromContext(ctx)
	var plan []nodeLabels
	hostOf := make(map[string]string) // node → host
	for _, a := range topo.Assignments {
		if len(a.Domains) == 0 {
			logger.Info("Host is on no switch; not labelled", "host", a.Host)
			continue
		}
		node, err := opts.naming.nodeName(a.Host)
		if err != nil {
			logger.Info("Host has no usable node name; not labelled", "host", a.Host, "reason", err.Error())
			continue
		}
		if other, dup := hostOf[node]; dup {
			return nil, fmt.Errorf("hosts %q and %q both map to node %q; adjust --strip-domain or --node-name-suffix", other, a.Host, node)
		}
		hostOf[node] = a.Host
		nl := nodeLabels{node: node, host: a.Host}
		for i, key := range opts.levelKeys {
			nl.labels = append(nl.labels, label{key, a.Domains[min(i, len(a.Domains)-1)]})
		}
		if opts.acceleratorKey != "" && a.AcceleratorDomain != "" {
			nl.labels = append(nl.labels, label{opts.acceleratorKey, a.AcceleratorDomain})
		}
		plan = append(plan, nl)
	}
	slices.SortFunc(plan, func(a, b nodeLabels) int { return strings.Compare(a.node, b.node) })
	return plan, nil
}

// writePlan prints "node  key=value key=value" per node, nodes sorted, keys
// in level order then the accelerator key.
func writePlan(out io.Writer, plan []nodeLabels) error {
	var b strings.Builder
	for _, nl := range plan {
		b.WriteString(nl.node)
		b.WriteString(" ")
		for _, l := range nl.labels {
			b.WriteString(" " + l.key + "=" + l.value)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// applyPlan merge-patches the planned labels onto the nodes, touching no
// other label. One list up front finds missing nodes and nodes already
// labelled, so that a re-run patches only what changed.
func applyPlan(ctx context.Context, client kubernetes.Interface, plan []nodeLabels) error {
	logger := klog.FromContext(ctx)
	// ResourceVersion "0" lets the API server answer from its watch cache.
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	current := make(map[string]map[string]string, len(list.Items))
	for _, n := range list.Items {
		current[n.Name] = n.Labels
	}

	var patched, unchanged, notFound int
	var failures []error
	for _, nl := range plan {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped after patching %d nodes: %w", patched, err)
		}
		have, ok := current[nl.node]
		if !ok {
			logger.Info("Warning: node not found in the cluster; skipped", "node", klog.KRef("", nl.node), "host", nl.host)
			notFound++
			continue
		}
		want := make(map[string]string, len(nl.labels))
		for _, l := range nl.labels {
			want[l.key] = l.value
		}
		if labelsHold(have, want) {
			logger.V(5).Info("Node already labelled", "node", klog.KRef("", nl.node))
			unchanged++
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": want}})
		if err != nil {
			return fmt.Errorf("encoding the patch for node %s: %w", nl.node, err)
		}
		_, err = client.CoreV1().Nodes().Patch(ctx, nl.node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
		switch {
		case apierrors.IsNotFound(err):
			logger.Info("Warning: node deleted before it could be patched; skipped", "node", klog.KRef("", nl.node), "host", nl.host)
			notFound++
		case err != nil:
			logger.Error(err, "Patching node labels failed", "node", klog.KRef("", nl.node))
			failures = append(failures, fmt.Errorf("node %s: %w", nl.node, err))
		default:
			logger.V(2).Info("Node labelled", "node", klog.KRef("", nl.node), "labels", want)
			patched++
		}
	}
	logger.Info("Fabric import done", "patched", patched, "unchanged", unchanged, "notFound", notFound, "failed", len(failures))
	if len(failures) > 0 {
		return fmt.Errorf("patching %d of %d nodes failed: %w", len(failures), len(plan), errors.Join(failures...))
	}
	return nil
}

func labelsHold(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}
