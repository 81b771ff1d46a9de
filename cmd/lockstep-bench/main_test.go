package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-dev/lockstep/pkg/localcluster"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

func TestSelectSchedulers(t *testing.T) {
	tests := []struct {
		list    string
		want    []string
		wantErr string
	}{
		{list: "kube-scheduler,coscheduling,lockstep", want: []string{"kube-scheduler", "coscheduling", "lockstep"}},
		// Report order, whatever the order asked.
		{list: "lockstep, kube-scheduler", want: []string{"kube-scheduler", "lockstep"}},
		{list: "lockstep,volcano", wantErr: `unknown scheduler(s) ["volcano"]`},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			got, err := selectSchedulers(tt.list, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range got {
				names = append(names, s.Name)
			}
			if diff := cmp.Diff(tt.want, names); diff != "" {
				t.Errorf("schedulers (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestLoadTraceChecksTheModel(t *testing.T) {
	model, err := clustermodel.Load(filepath.Join("..", "..", "test", "e2e", "models", "hgx-32-oversubscribed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, rows, wantErr string
	}{
		{name: "fits", rows: "a,0,2,8,60,leaf:Required\nb,1,1,1,60,host:Preferred\n"},
		{name: "unknown level", rows: "a,0,2,8,60,clique:Required\n", wantErr: `job a: topology level "clique" is not a level of model hgx-32-oversubscribed`},
		{name: "pod larger than any node", rows: "big,0,1,16,60,\n", wantErr: "job big: 16 GPUs per replica, but the largest node of model hgx-32-oversubscribed has 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "trace.csv")
			if err := os.WriteFile(path, []byte(bench.TraceHeader+"\n"+tt.rows), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := loadTrace(path, model)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestTrainingJobFromTrace(t *testing.T) {
	tests := []struct {
		name        string
		job         bench.Job
		compression float64
		wantWorkers int32
		wantTopo    *v1alpha1.TopologyConstraint
		wantRun     *v1alpha1.RunPolicy
	}{
		{
			name: "single pod", job: bench.Job{ID: "one", Replicas: 1, GPUsPerReplica: 1, Duration: time.Minute}, compression: 1,
			wantRun: &v1alpha1.RunPolicy{
				RestartBackoff: &v1alpha1.RestartBackoff{InitialSeconds: ptr.To[int32](10), MaxSeconds: ptr.To[int32](360), ResetAfterSeconds: ptr.To[int32](600)}},
		},
		{
			name:        "gang with constraint and priority class, compressed 60×",
			job:         bench.Job{ID: "gang", Replicas: 4, GPUsPerReplica: 8, Duration: time.Minute, Topology: &bench.Constraint{Level: "leaf", Mode: bench.ModeRequired}, Priority: bench.PriorityHigh},
			compression: 60,
			wantWorkers: 3,
			wantTopo:    &v1alpha1.TopologyConstraint{Level: "leaf", Mode: v1alpha1.TopologyRequired},
			// 10 s, 360 s and 600 s over 60, floored at 1 s.
			wantRun: &v1alpha1.RunPolicy{
				RestartBackoff:   &v1alpha1.RestartBackoff{InitialSeconds: ptr.To[int32](1), MaxSeconds: ptr.To[int32](6), ResetAfterSeconds: ptr.To[int32](10)},
				SchedulingPolicy: &v1alpha1.SchedulingPolicy{PriorityClass: bench.PriorityHigh}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tj := trainingJob(tt.job, tt.compression)
			if errs := tj.Validate(); len(errs) > 0 {
				t.Fatalf("invalid TrainingJob: %v", errs.ToAggregate())
			}
			if tj.Name != tt.job.ID || tj.Namespace != benchNamespace {
				t.Errorf("job %s/%s, want %s/%s", tj.Namespace, tj.Name, benchNamespace, tt.job.ID)
			}
			master, ok := tj.Spec.ReplicaSpecs[v1alpha1.ReplicaMaster]
			if !ok || master.DesiredReplicas() != 1 {
				t.Fatalf("want one Master, have %v", tj.Spec.ReplicaSpecs)
			}
			worker, hasWorkers := tj.Spec.ReplicaSpecs[v1alpha1.ReplicaWorker]
			var got int32
			if hasWorkers {
				got = worker.DesiredReplicas()
			}
			if got != tt.wantWorkers {
				t.Errorf("%d Workers, want %d", got, tt.wantWorkers)
			}
			gpus := master.Template.Spec.Containers[0].Resources.Limits[lockstep.GPUResource]
			if gpus.Value() != int64(tt.job.GPUsPerReplica) {
				t.Errorf("%s GPUs per pod, want %d", gpus.String(), tt.job.GPUsPerReplica)
			}
			if diff := cmp.Diff(tt.wantTopo, tj.Spec.Topology); diff != "" {
				t.Errorf("topology (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRun, tj.Spec.RunPolicy); diff != "" {
				t.Errorf("runPolicy (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestScaleJobs(t *testing.T) {
	jobs := scaleJobs(120)
	pods := 0
	for _, j := range jobs {
		if err := j.Validate(); err != nil {
			t.Fatal(err)
		}
		pods += j.Replicas
	}
	if len(jobs) != 120 || pods != 840 {
		t.Errorf("%d jobs with %d pods, want 120 with 840", len(jobs), pods)
	}
}

func TestCompressedConfigScalesPreferredWait(t *testing.T) {
	root := filepath.Join("..", "..")
	_, _, deployed, err := compressedConfig(root, 1, -1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		compression float64
		wait        time.Duration
		want        time.Duration
	}{
		{name: "deployed, uncompressed", compression: 1, wait: -1, want: deployed},
		{name: "deployed at 60x", compression: 60, wait: -1, want: (deployed / 60).Round(time.Millisecond)},
		{name: "30s at 60x", compression: 60, wait: 30 * time.Second, want: 500 * time.Millisecond},
		{name: "30s at 7x", compression: 7, wait: 30 * time.Second, want: 4286 * time.Millisecond},
		{name: "0s", compression: 60, wait: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, wait, _, err := compressedConfig(root, tt.compression, tt.wait)
			if err != nil {
				t.Fatal(err)
			}
			if wait != tt.want {
				t.Errorf("wait %s, want %s", wait, tt.want)
			}
			// The wait every profile is given is the one reported: the
			// profiles share one TopologyPlacement, which refuses differing
			// args.
			all := localcluster.TopologyPlacementArgs(cfg)
			if len(all) < 2 {
				t.Errorf("%d profiles configure TopologyPlacement, want lockstep-scheduler and its alias", len(all))
			}
			for i, args := range all {
				if got := args["preferredWait"]; got != tt.want.String() {
					t.Errorf("profile %d's preferredWait %v, want %s", i, got, tt.want)
				}
			}
		})
	}
}

func TestParseWaits(t *testing.T) {
	tests := []struct {
		list    string
		want    []time.Duration
		wantErr bool
	}{
		{list: "", want: nil},
		{list: defaultSweepWaits, want: []time.Duration{0, 15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute}},
		{list: "30s, 0s,30s", want: []time.Duration{30 * time.Second, 0}},
		{list: "30", wantErr: true},
		{list: "-1s", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseWaits(tt.list)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseWaits(%q) error %v, want error %v", tt.list, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("parseWaits(%q) (-want,+got):\n%s", tt.list, diff)
		}
	}
}

// TestRenderRewritesReportFromResults: --render brings a results
// directory's report.md up to the report's format from its results.json
// alone, and refuses a directory without one.
func TestRenderRewritesReportFromResults(t *testing.T) {
	dir := t.TempDir()
	mean := 0.99
	r := bench.Report{
		Results: []bench.Result{{Scheduler: bench.SchedulerLockstep, Jobs: 2, FinishedJobs: 2, EfficiencyMean: &mean}},
		Sweep:   &bench.Sweep{DeployedWaitSeconds: 30, Points: []bench.SweepPoint{{WaitSeconds: 30, Jobs: 2, FinishedJobs: 2, GPUHours: 1, EfficiencyMean: &mean}}},
	}
	if err := r.WriteAll(dir); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte("stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := render(dir); err != nil {
		t.Fatalf("render: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("rendered report.md (-want +got):\n%s", diff)
	}
	if err := render(t.TempDir()); err == nil {
		t.Errorf("render of a directory without results.json: no error")
	}
}

// TestReplayBackoffIsCompressed: every scheduler of a replay gets the
// scheduler's pod backoff divided by the time compression, floored at 1 s.
func TestReplayBackoffIsCompressed(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, tt := range []struct {
		compression          float64
		wantInitial, wantMax int64
	}{
		{compression: 1, wantInitial: 1, wantMax: 10},
		{compression: 4, wantInitial: 1, wantMax: 3},
		{compression: 60, wantInitial: 1, wantMax: 1},
	} {
		cfg, _, _, err := compressedConfig(root, tt.compression, -1)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"podInitialBackoffSeconds": tt.wantInitial, "podMaxBackoffSeconds": tt.wantMax}
		if diff := cmp.Diff(want, replayBackoff(cfg)); diff != "" {
			t.Errorf("%gx: lockstep's backoff (-want,+got):\n%s", tt.compression, diff)
		}
		for _, name := range []string{bench.SchedulerKube, bench.SchedulerCoscheduling} {
			base := schedulerConfig(replayBackoff(cfg), map[string]any{"schedulerName": name})
			if diff := cmp.Diff(want, replayBackoff(base)); diff != "" {
				t.Errorf("%gx: %s's backoff (-want,+got):\n%s", tt.compression, name, diff)
			}
		}
	}
}

// TestSchedulersKeepDefaultPreemption is what the priority replay's report
// says: the stock schedulers keep upstream's DefaultPreemption, Lockstep
// replaces it with TopologyPlacement's gang preemption.
func TestSchedulersKeepDefaultPreemption(t *testing.T) {
	cfg, _, _, err := compressedConfig(filepath.Join("..", ".."), 60, -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range schedulers(cfg) {
		if want := s.Name != bench.SchedulerLockstep; keepsDefaultPreemption(s.config) != want {
			t.Errorf("%s: keeps DefaultPreemption = %v, want %v", s.Name, !want, want)
		}
	}
}

func TestKeepsDefaultPreemption(t *testing.T) {
	profile := func(plugins map[string]any) map[string]any {
		return map[string]any{"profiles": []any{
			map[string]any{"schedulerName": "a"},
			map[string]any{"schedulerName": "b", "plugins": plugins},
		}}
	}
	disable := func(name string) map[string]any {
		return map[string]any{"disabled": []any{map[string]any{"name": name}}}
	}
	tests := []struct {
		name string
		cfg  map[string]any
		want bool
	}{
		{"default profiles", profile(nil), true},
		{"only queueSort disabled", profile(map[string]any{"queueSort": disable("*")}), true},
		{"another postFilter plugin disabled", profile(map[string]any{"postFilter": disable("Coscheduling")}), true},
		{"postFilter disabled", profile(map[string]any{"postFilter": disable(defaultPreemption)}), false},
		{"every postFilter plugin disabled", profile(map[string]any{"postFilter": disable("*")}), false},
		{"multiPoint disabled", profile(map[string]any{"multiPoint": disable(defaultPreemption)}), false},
		{"no profiles", map[string]any{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := keepsDefaultPreemption(tc.cfg); got != tc.want {
				t.Errorf("keepsDefaultPreemption = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseGPUDrivers(t *testing.T) {
	tests := []struct {
		list    string
		want    []string
		wantErr string
	}{
		{list: "DevicePlugin", want: []string{bench.GPUDriverDevicePlugin}},
		{list: "DRA", want: []string{bench.GPUDriverDRA}},
		// The device-plugin replays run first whatever the order given.
		{list: " DRA, DevicePlugin,DRA", want: []string{bench.GPUDriverDevicePlugin, bench.GPUDriverDRA}},
		{list: "", wantErr: `unknown GPU driver ""`},
		{list: "DevicePlugin,dra", wantErr: `unknown GPU driver "dra"; known: DevicePlugin, DRA`},
	}
	for _, tc := range tests {
		t.Run(tc.list, func(t *testing.T) {
			got, err := parseGPUDrivers(tc.list)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseGPUDrivers(%q) = %v, %v; want an error with %q", tc.list, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseGPUDrivers(%q) (-want,+got):\n%s", tc.list, diff)
			}
		})
	}
}

// TestWriteModelDRA checks the DRA replay's model: written beside the
// results, it reads back as the replay model with every pool on DRA.
func TestWriteModelDRA(t *testing.T) {
	m, err := clustermodel.Load(filepath.Join("..", "..", "test", "e2e", "models", "hgx-32-oversubscribed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	path, err := writeModel(filepath.Join(t.TempDir(), "models", "hgx-32-oversubscribed-dra.yaml"), m.WithGPUDriver(bench.GPUDriverDRA))
	if err != nil {
		t.Fatal(err)
	}
	got, err := clustermodel.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var drivers []string
	for _, p := range got.Pools {
		drivers = append(drivers, p.GPUDriver)
	}
	if diff := cmp.Diff([]string{lockstep.GPUDriverDRA}, drivers); diff != "" {
		t.Errorf("pools' GPU drivers (-want,+got):\n%s", diff)
	}
	// The same nodes in the same domains, for the metrics; only the
	// labels saying which driver serves the GPUs differ.
	draCluster := benchCluster(got)
	for _, n := range draCluster.Nodes {
		if n.Labels[lockstep.LabelGPUDriver] != lockstep.GPUDriverDRA {
			t.Errorf("node %s is labelled %s=%q, want %s", n.Name, lockstep.LabelGPUDriver, n.Labels[lockstep.LabelGPUDriver], lockstep.GPUDriverDRA)
		}
		delete(n.Labels, lockstep.LabelGPUDriver)
		delete(n.Labels, lockstep.LabelNVIDIADeployDevicePlugin)
	}
	if diff := cmp.Diff(benchCluster(m), draCluster); diff != "" {
		t.Errorf("the DRA model's cluster differs from the replay model's (-want,+got):\n%s", diff)
	}
}
