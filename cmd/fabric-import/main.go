// Command fabric-import (built as lockstep-fabric-import) labels nodes with
// their network tiers, read from an ibnetdiscover topology or a topograph
// instance document:
//
//	lockstep-fabric-import --ibnetdiscover fabric.txt --dry-run
//	lockstep-fabric-import --topograph topology.json --kubeconfig ~/.kube/config
//
// Each host's domains, narrowest first, go to the --level-keys labels of the
// node of the same name; see pkg/fabric for how tiers are derived.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	flags := flag.NewFlagSet("lockstep-fabric-import", flag.ExitOnError)
	klog.InitFlags(flags)
	var opts options
	var levelKeys string
	flags.StringVar(&opts.ibnetdiscoverPath, "ibnetdiscover", "", "file holding ibnetdiscover's topology output")
	flags.StringVar(&opts.topographPath, "topograph", "", "file holding topograph's graph-engine instance document (JSON)")
	flags.StringVar(&levelKeys, "level-keys", strings.Join(defaultLevelKeys, ","), "comma-separated node label keys for the tiers, narrowest (leaf) first; a host with fewer tiers repeats its widest domain")
	flags.StringVar(&opts.acceleratorKey, "accelerator-key", defaultAcceleratorKey, "node label key for the NVLink domain where the input has one (topograph); empty to skip")
	flags.StringVar(&opts.kubeconfig, "kubeconfig", "", "kubeconfig file; default: $KUBECONFIG, ~/.kube/config, then in-cluster")
	flags.BoolVar(&opts.dryRun, "dry-run", false, "print the labels per node instead of patching nodes; no API calls")
	flags.BoolVar(&opts.naming.stripDomain, "strip-domain", false, "drop everything from the first dot of a host name (node-01.ib.example.com → node-01)")
	flags.StringVar(&opts.naming.suffix, "node-name-suffix", "", "append this to every host name to form the node name (e.g. .cluster.example.com)")
	_ = flags.Parse(os.Args[1:]) // ExitOnError: Parse exits on failure
	opts.levelKeys = splitList(levelKeys)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)
	err := run(ctx, opts, os.Stdout, newClientset)
	stop()
	if err != nil {
		logger.Error(err, "Fabric import failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// newClientset builds a clientset with client-go's standard kubeconfig
// loading rules: --kubeconfig, else $KUBECONFIG, else ~/.kube/config, else
// the in-cluster service account.
func newClientset(kubeconfig string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	// One patch per node: client-go's default 5 QPS would take minutes on a
	// large cluster's first import.
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = fieldManager
	return kubernetes.NewForConfig(cfg)
}
