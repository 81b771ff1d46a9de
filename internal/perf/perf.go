// Package perf measures scheduling throughput in one process, in the manner
// of kubernetes' scheduler_perf: a real etcd and kube-apiserver (package
// envtest), nodes written straight to the API and left as written (no KWOK
// or kubelet), and the schedulers run in this process, one at a time, on
// the same cluster and the same pods. Running both schedulers in alternating
// rounds in one process keeps the noise of a shared machine out of their
// ratio, which the KWOK benchmark (cmd/lockstep-bench) measures end to end.
//
// What each side does: stock kube-scheduler runs its default profile (no
// gangs, no topology); Lockstep runs deploy/scheduler/config.yaml with our
// plugins (LockstepCoscheduling + TopologyPlacement). Both get the same
// pods, gang members with their PodGroup as the TrainingJob controller
// writes them (minMember, minResources); stock kube-scheduler ignores the
// PodGroup and places each pod on its own. Both talk to the apiserver at
// the same client rate, clientRate.
//
// Like upstream's scheduler_perf (test/integration/scheduler_perf), it is a
// developer's tool, not a library: internal, linked by cmd/lockstep-bench
// and its own smoke test only, never by a shipped binary (internal/arch).
package perf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	schedv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	"github.com/lockstep-dev/lockstep/pkg/agent"
	"github.com/lockstep-dev/lockstep/pkg/agent/discovery"
	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/localcluster"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
	"github.com/lockstep-dev/lockstep/pkg/scheduler"
	"github.com/lockstep-dev/lockstep/pkg/topology"
	lsenvtest "github.com/lockstep-dev/lockstep/pkg/util/envtest"
)

// Config is one measurement.
type Config struct {
	// Root is the module root: bin/ holds etcd and kube-apiserver, deploy/
	// the CRDs and lockstep-scheduler's configuration.
	Root string
	// Model is the cluster.
	Model *clustermodel.Model
	// Burst is the burst's jobs, written in this order; when empty, it is
	// bench.GangBurst(Gangs, GPUsPerPod).
	Burst []bench.BurstJob
	// Gangs is how many gangs the burst has when Burst is empty; their pod
	// counts cycle bench.ScaleGangSizes.
	Gangs int
	// GPUsPerPod is each pod's GPU request when Burst is empty.
	GPUsPerPod int
	// Rounds is how many times each scheduler binds the burst, alternating.
	Rounds int
	// Timeout bounds one scheduler's run.
	Timeout time.Duration
	// Log, when set, is told the progress.
	Log func(format string, args ...any)
	// Bound, when set, is called after a run bound every pod, before its
	// scheduler stops: a moment to take a heap profile.
	Bound func(sched string, round int)
	// Profile, when set, is called just before a run's scheduler is set up,
	// and the function it returns when the run bound every pod or failed,
	// before Bound: the span of a CPU profile of one scheduler, its start-up
	// (informers' lists, caches) included.
	Profile func(sched string, round int) (stop func())
}

// jobs is the burst.
func (c Config) jobs() []bench.BurstJob {
	if len(c.Burst) > 0 {
		return c.Burst
	}
	return bench.GangBurst(c.Gangs, c.GPUsPerPod)
}

// sizeFactor scales the waits that were tuned on the 5,000-node model to
// the model's node count (at least 1): at 25,000 nodes the scheduler's
// informers list five times the objects before its first bind, and a
// burst sized to the cluster takes five times as long to delete.
func (c Config) sizeFactor() time.Duration {
	return time.Duration(max(1, (c.Model.NodeCount()+4999)/5000))
}

// Schedulers are the schedulers compared, in the order each round runs
// them.
var Schedulers = []string{bench.SchedulerKube, bench.SchedulerLockstep}

// Measure starts the apiserver, writes the model's nodes and their
// NodeTopology, and runs each scheduler Rounds times on the burst.
func Measure(ctx context.Context, cfg Config) (result *bench.InProcessResult, err error) {
	e, err := start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	say := e.say
	defer func() { err = errors.Join(err, e.stop()) }()
	say("apiserver up; writing %d nodes", cfg.Model.NodeCount())
	phase := time.Now()
	if err := e.writeNodes(ctx); err != nil {
		return nil, err
	}
	say("%d nodes Ready in %s; writing their NodeTopology", len(e.nodes), since(phase))
	phase = time.Now()
	if err := e.publishTopology(ctx); err != nil {
		return nil, err
	}
	say("%d NodeTopology written in %s", len(e.nodes), since(phase))
	jobs := cfg.jobs()
	result = &bench.InProcessResult{Nodes: len(e.nodes), Rounds: cfg.Rounds, Jobs: len(jobs), Mix: bench.BurstMix(jobs)}
	for round := 1; round <= cfg.Rounds; round++ {
		for _, sched := range Schedulers {
			run, err := e.runOnce(ctx, sched, round, jobs)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", sched, round, err)
			}
			result.Pods = run.Pods
			result.Runs = append(result.Runs, run)
			say("round %d: %s bound %d pods at %.1f pods/s, peak heap +%d MiB", round, sched, run.Pods, run.PodsPerSecond, run.PeakHeapBytes>>20)
		}
	}
	return result, nil
}

// since is the time since start, to the tenth of a second, for the log.
func since(start time.Time) time.Duration {
	return time.Since(start).Round(100 * time.Millisecond)
}

// env is the apiserver and what Measure wrote to it.
type env struct {
	cfg        Config
	api        *envtest.Environment
	client     client.Client
	clientset  kubernetes.Interface
	dir        string
	kubeconfig string
	nodes      []*corev1.Node
	// published is when NodeTopology heartbeats were last written.
	published time.Time
}

func start(ctx context.Context, cfg Config) (*env, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	api, restCfg, err := lsenvtest.Start(cfg.Root, scheme)
	if err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, api: api}
	fail := func(err error) (*env, error) { return nil, errors.Join(err, e.stop()) }
	// Writing thousands of nodes is setup, not measured: no client-side
	// rate limit for it.
	restCfg.QPS, restCfg.Burst = -1, 0
	if e.client, err = client.New(restCfg, client.Options{Scheme: scheme}); err != nil {
		return fail(err)
	}
	if e.clientset, err = kubernetes.NewForConfig(restCfg); err != nil {
		return fail(err)
	}
	if e.dir, err = os.MkdirTemp("", "lockstep-perf-"); err != nil {
		return fail(err)
	}
	user, err := api.AddUser(envtest.User{Name: "lockstep-perf-scheduler", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fail(fmt.Errorf("adding the schedulers' user: %w", err))
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fail(err)
	}
	e.kubeconfig = filepath.Join(e.dir, "kubeconfig")
	if err := os.WriteFile(e.kubeconfig, kc, 0o600); err != nil {
		return fail(err)
	}
	return e, ctx.Err()
}

func newScheme() (*k8sruntime.Scheme, error) {
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, schedv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// say tells cfg.Log the progress.
func (e *env) say(format string, args ...any) {
	if e.cfg.Log != nil {
		e.cfg.Log(format, args...)
	}
}

func (e *env) stop() error {
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
	return e.api.Stop()
}

// parallel runs f on every index below n with a few workers, returning the
// first error.
func parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	const workers = 16
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// writeNodes creates the model's nodes, Ready: nothing runs on them, so
// nothing else would mark them.
func (e *env) writeNodes(ctx context.Context) error {
	e.nodes = e.cfg.Model.Nodes()
	now := metav1.Now()
	return parallel(ctx, len(e.nodes), func(ctx context.Context, i int) error {
		node := e.nodes[i]
		node.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		created, err := e.clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating node %s: %w", node.Name, err)
		}
		if len(created.Status.Conditions) == 0 {
			created.Status = node.Status
			if created, err = e.clientset.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("marking node %s Ready: %w", node.Name, err)
			}
		}
		if len(created.Spec.Taints) > 0 {
			// The apiserver's TaintNodesByCondition admission taints a new
			// node not-ready; the node lifecycle controller, not run here,
			// would lift it once the node reports Ready.
			created.Spec.Taints = nil
			if created, err = e.clientset.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("untainting node %s: %w", node.Name, err)
			}
		}
		e.nodes[i] = created
		return nil
	})
}

// publishTopology writes every node's NodeTopology the way the fake
// topology agent does (agent.Publisher, the hardware of the node's profile),
// with no GPU allocated.
func (e *env) publishTopology(ctx context.Context) error {
	clique := ""
	for _, l := range e.cfg.Model.TopologyConfig().Levels {
		if l.NVLink {
			clique = l.LabelKey
		}
	}
	pub := &agent.Publisher{Client: e.client, Clock: clock.RealClock{}, HeartbeatInterval: time.Minute, Mode: "fake"}
	// The first heartbeat written is the oldest.
	e.published = time.Now()
	return parallel(ctx, len(e.nodes), func(ctx context.Context, i int) error {
		node := e.nodes[i]
		profile, ok := topology.LookupProfile(node.Labels[lockstep.LabelProfile])
		if !ok {
			return fmt.Errorf("node %s: label %s=%q names no hardware profile", node.Name, lockstep.LabelProfile, node.Labels[lockstep.LabelProfile])
		}
		report, err := discovery.ProfileBackend{Profile: profile, NodeName: node.Name, Clique: node.Labels[clique]}.Discover(ctx)
		if err != nil {
			return err
		}
		hw := &report.Topology
		status := v1alpha1.NodeTopologyStatus{FreeGPUs: int32(hw.NumGPUs())}
		_, err = pub.Publish(ctx, node, v1alpha1.SpecFromTopology(hw, profile.Name), status)
		return err
	})
}

// heartbeat moves every NodeTopology's heartbeat to at, as an agent's
// heartbeat does, with one small status patch per node: Publish's read and
// whole-object write of the spec's GPU tables take minutes at 25,000 nodes.
func (e *env) heartbeat(ctx context.Context, at time.Time) error {
	now := metav1.NewTime(at)
	data, err := json.Marshal(map[string]any{"status": map[string]any{"heartbeatTime": now}})
	if err != nil {
		return err
	}
	patch := client.RawPatch(types.MergePatchType, data)
	e.published = now.Time
	return parallel(ctx, len(e.nodes), func(ctx context.Context, i int) error {
		nt := &v1alpha1.NodeTopology{ObjectMeta: metav1.ObjectMeta{Name: e.nodes[i].Name}}
		if err := e.client.Status().Patch(ctx, nt, patch); err != nil {
			return fmt.Errorf("heartbeat of NodeTopology %s: %w", nt.Name, err)
		}
		return nil
	})
}

// burst writes the burst's PodGroups and pods in namespace ns for
// schedulerName, as the TrainingJob controller writes a PyTorch job's:
// minMember and minResources of all members on the PodGroup, the PodGroup
// label on each pod.
func (e *env) burst(ctx context.Context, ns, schedulerName string, jobs []bench.BurstJob) (int, error) {
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return 0, err
	}
	var pods []*corev1.Pod
	pgs := make([]*schedv1alpha1.PodGroup, len(jobs))
	for g, job := range jobs {
		gpus := *resource.NewQuantity(int64(job.GPUsPerPod), resource.DecimalSI)
		name := fmt.Sprintf("burst-%03d", g)
		pgs[g] = &schedv1alpha1.PodGroup{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: schedv1alpha1.PodGroupSpec{
				MinMember:    int32(job.Pods),
				MinResources: corev1.ResourceList{lockstep.GPUResource: *resource.NewQuantity(int64(job.GPUs()), resource.DecimalSI)},
			},
		}
		for i := range job.Pods {
			pods = append(pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("%s-%d", name, i), Namespace: ns,
					Labels: map[string]string{schedv1alpha1.PodGroupLabel: name},
				},
				Spec: corev1.PodSpec{
					SchedulerName: schedulerName,
					Containers: []corev1.Container{{
						Name:  "trainer",
						Image: "registry.example/lockstep/bench-trainer:v1",
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{lockstep.GPUResource: gpus},
							Limits:   corev1.ResourceList{lockstep.GPUResource: gpus},
						},
					}},
				},
			})
		}
	}
	// Every PodGroup before its pods, as the TrainingJob controller writes
	// them: a member seen before its PodGroup would wait for it.
	err := parallel(ctx, len(pgs), func(ctx context.Context, i int) error {
		if err := e.client.Create(ctx, pgs[i]); err != nil {
			return fmt.Errorf("creating PodGroup %s/%s: %w", ns, pgs[i].Name, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	err = parallel(ctx, len(pods), func(ctx context.Context, i int) error {
		if _, err := e.clientset.CoreV1().Pods(ns).Create(ctx, pods[i], metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s/%s: %w", ns, pods[i].Name, err)
		}
		return nil
	})
	return len(pods), err
}

// clientRate is both schedulers' client rate here, scheduler_perf's (QPS and
// burst 5,000): high enough that binding is limited by the scheduler, not
// the client. At the local clusters' 200 QPS, burst 400, both schedulers
// bound the 840-pod burst at the limiter's 382 pods/s and the ratio said
// nothing.
var clientRate = localcluster.ClientRate{QPS: 5000, Burst: 5000}

// schedulerOptions are the kube-scheduler options and registry of sched.
func (e *env) schedulerOptions(sched string) (*options.Options, []app.Option, error) {
	var cfg map[string]any
	var registry []app.Option
	switch sched {
	case bench.SchedulerKube:
		cfg = map[string]any{
			"apiVersion": "kubescheduler.config.k8s.io/v1",
			"kind":       "KubeSchedulerConfiguration",
			"profiles":   []any{map[string]any{"schedulerName": corev1.DefaultSchedulerName}},
		}
	case bench.SchedulerLockstep:
		deployed, err := localcluster.DeployedSchedulerConfig(e.cfg.Root)
		if err != nil {
			return nil, nil, err
		}
		cfg = localcluster.WithTopology(deployed, e.cfg.Model.TopologyConfig())
		if err := scaleTopologyMaxAge(cfg, e.cfg.sizeFactor()); err != nil {
			return nil, nil, err
		}
		registry = scheduler.OutOfTree()
	default:
		return nil, nil, fmt.Errorf("unknown scheduler %q; known: %v", sched, Schedulers)
	}
	data, err := localcluster.RenderSchedulerConfigAtRate(cfg, e.kubeconfig, nil, clientRate)
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(e.dir, sched+".yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, nil, err
	}
	opts := options.NewOptions()
	opts.ConfigFile = path
	// No health or metrics endpoints: nothing scrapes them here, and two
	// schedulers in turn would contend for the port.
	opts.SecureServing.BindPort = 0
	return opts, registry, nil
}

// scaleTopologyMaxAge multiplies the topologyMaxAge of cfg's
// TopologyPlacement args by factor. No agent heartbeats here: heartbeats are
// written in setup only, which at 25,000 nodes takes minutes on a small
// machine, and with deploy/'s five minutes the nodes written first would go
// stale during Lockstep's run and drop out of planning, measuring the
// benchmark's setup rather than the scheduler. Up to 5,000 nodes (factor 1)
// it is deploy/'s.
func scaleTopologyMaxAge(cfg map[string]any, factor time.Duration) error {
	for _, args := range localcluster.TopologyPlacementArgs(cfg) {
		s, ok := args["topologyMaxAge"].(string)
		if !ok {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("TopologyPlacement topologyMaxAge %q: %w", s, err)
		}
		args["topologyMaxAge"] = (d * factor).String()
	}
	return nil
}

// schedulerNameOf is the pods' spec.schedulerName for sched.
func schedulerNameOf(sched string) string {
	if sched == bench.SchedulerLockstep {
		return lockstep.SchedulerName
	}
	return corev1.DefaultSchedulerName
}

// runOnce has sched bind a fresh burst, then deletes it.
func (e *env) runOnce(ctx context.Context, sched string, round int, jobs []bench.BurstJob) (run bench.InProcessRun, err error) {
	run = bench.InProcessRun{Scheduler: sched, Round: round}
	ns := fmt.Sprintf("%s-%d", sched, round)
	phase := time.Now()
	want, err := e.burst(ctx, ns, schedulerNameOf(sched), jobs)
	if err != nil {
		return run, err
	}
	run.Pods = want
	defer func() {
		phase := time.Now()
		err = errors.Join(err, e.clear(ctx, ns))
		e.say("round %d: %s's burst deleted in %s", round, sched, since(phase))
	}()
	e.say("round %d: %s's burst of %d jobs, %d pods written in %s", round, sched, len(jobs), want, since(phase))
	// Heartbeats are refreshed after the burst is written, which takes
	// minutes at 25,000 nodes, so the run has most of topologyMaxAge
	// (scaleTopologyMaxAge) before nodes with stale NodeTopology drop out of
	// planning.
	if sched == bench.SchedulerLockstep && time.Since(e.published) > 2*time.Minute*e.cfg.sizeFactor() {
		phase = time.Now()
		if err := e.heartbeat(ctx, time.Now()); err != nil {
			return run, err
		}
		e.say("round %d: NodeTopology heartbeats refreshed in %s", round, since(phase))
	}

	binds := newBindLog()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	factory := informers.NewSharedInformerFactoryWithOptions(e.clientset, 0, informers.WithNamespace(ns))
	podInformer := factory.Core().V1().Pods().Informer()
	if _, err := podInformer.AddEventHandler(binds.handler()); err != nil {
		return run, err
	}
	factory.Start(watchCtx.Done())
	if !cache.WaitForCacheSync(watchCtx.Done(), podInformer.HasSynced) {
		return run, errors.New("the pod informer did not sync")
	}

	opts, registry, err := e.schedulerOptions(sched)
	if err != nil {
		return run, err
	}
	runtime.GC()
	heap := startHeapSampler()
	stopProfile := func() {}
	if e.cfg.Profile != nil {
		stopProfile = e.cfg.Profile(sched, round)
	}
	started := time.Now()
	cpu := readCPU()
	schedCtx, stopSched := context.WithCancel(ctx)
	cc, s, err := app.Setup(schedCtx, opts, registry...)
	if err != nil {
		stopSched()
		stopProfile()
		heap.stop()
		return run, fmt.Errorf("setting up the scheduler: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(schedCtx, cc, s) }()
	stopScheduler := func() error {
		stopSched()
		err := <-done
		// app.Run registers its configuration under a fixed name; the next
		// run in this process registers it again.
		configz.Delete("componentconfig")
		// Run returns an error whenever its context ends ("finished without
		// leader elect"); only an end before stopSched is a failure, and
		// the wait reports that.
		_ = err
		return nil
	}

	var last int
	lastChange := time.Now()
	stall := stallAfter * e.cfg.sizeFactor()
	waitErr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, e.cfg.Timeout, true, func(context.Context) (bool, error) {
		n := binds.count()
		if n != last {
			if last == 0 {
				e.say("round %d: %s's first bind %s after it started, its peak heap so far +%d MiB", round, sched, since(started), heap.peakSoFar()>>20)
			}
			last, lastChange = n, time.Now()
		}
		if n >= want {
			return true, nil
		}
		select {
		case err := <-done:
			done <- err
			return false, fmt.Errorf("the scheduler stopped after binding %d of %d pods: %v", n, want, err)
		default:
		}
		if time.Since(lastChange) > stall {
			return false, fmt.Errorf("%d of %d pods bound, none for %s%s", n, want, stall, e.pendingReason(ctx, ns))
		}
		return false, nil
	})
	spent := cpu.since()
	stopProfile()
	run.PeakHeapBytes = heap.stop()
	run.SchedulerCPUSeconds, run.ControlPlaneCPUSeconds = spent.self.Seconds(), spent.controlPlane.Seconds()
	run.WallSeconds = time.Since(started).Seconds()
	e.say("round %d: %s ran %s (%d of %d pods bound)", round, sched, since(started), binds.count(), want)
	if waitErr == nil && e.cfg.Bound != nil {
		e.cfg.Bound(sched, round)
	}
	if err := errors.Join(waitErr, stopScheduler()); err != nil {
		return run, err
	}
	times := binds.times()
	run.PodsPerSecond = bench.BindThroughput(times)
	run.BoundBy = bench.BindProgress(times, started)
	return run, nil
}

// clear deletes the burst's pods and PodGroups, waiting until the pods are
// gone so the next run starts on empty nodes. With no kubelet, a pod
// deleted with no grace period is removed at once.
func (e *env) clear(ctx context.Context, ns string) error {
	zero := int64(0)
	if err := e.clientset.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("deleting the pods of %s: %w", ns, err)
	}
	if err := e.client.DeleteAllOf(ctx, &schedv1alpha1.PodGroup{}, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("deleting the PodGroups of %s: %w", ns, err)
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute*e.cfg.sizeFactor(), true, func(ctx context.Context) (bool, error) {
		pods, err := e.clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
}

// bindLog records when each pod was first seen bound.
type bindLog struct {
	mu    sync.Mutex
	bound map[string]time.Time
}

func newBindLog() *bindLog { return &bindLog{bound: map[string]time.Time{}} }

func (b *bindLog) handler() cache.ResourceEventHandler {
	see := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return
		}
		now := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, seen := b.bound[pod.Name]; !seen {
			b.bound[pod.Name] = now
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, obj any) { see(obj) }}
}

func (b *bindLog) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.bound)
}

func (b *bindLog) times() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]time.Time, 0, len(b.bound))
	for _, t := range b.bound {
		out = append(out, t)
	}
	return out
}

// heapObjects is the runtime metric of heap memory in objects, live or not
// yet swept.
const heapObjects = "/memory/classes/heap/objects:bytes"

// heapSampler records the peak of heapObjects above its value at start.
type heapSampler struct {
	base uint64
	// done asks the sampler to take its last sample; stopped says it has.
	done, stopped chan struct{}
	// peak is the peak so far: read at the first bind (whether start-up
	// or the burst sets it) and at the end.
	peak atomic.Uint64
}

func readHeap() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{base: readHeap(), done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(h.stopped)
		ticker := time.NewTicker(20 * time.Millisecond)
		defer ticker.Stop()
		for {
			// Only this goroutine writes the peak.
			h.peak.Store(max(h.peak.Load(), readHeap()))
			select {
			case <-h.done:
				return
			case <-ticker.C:
			}
		}
	}()
	return h
}

// peakSoFar is the peak sampled so far above the start.
func (h *heapSampler) peakSoFar() uint64 {
	if p := h.peak.Load(); p > h.base {
		return p - h.base
	}
	return 0
}

// stop ends sampling and returns the peak above the start.
func (h *heapSampler) stop() uint64 {
	close(h.done)
	<-h.stopped
	return h.peakSoFar()
}

// pendingReason describes why a pod of ns waits, from its PodScheduled
// condition, for the error of a stalled run.
func (e *env) pendingReason(ctx context.Context, ns string) string {
	pods, err := e.clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != "" {
			continue
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				return fmt.Sprintf("; pod %s: %s: %s", pod.Name, c.Reason, c.Message)
			}
		}
		return fmt.Sprintf("; pod %s has no PodScheduled condition (never attempted)", pod.Name)
	}
	return ""
}

// stallAfter ends a run in which no pod was bound for this long.
var stallAfter = time.Minute
