package main

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstep-dev/lockstep/pkg/bench"
	"github.com/lockstep-dev/lockstep/pkg/clustermodel"
)

func TestInProcessBurst(t *testing.T) {
	tests := []struct {
		name, model, burst string
		// largest is the largest job's GPUs, gangGPUsPerPod what a pod of
		// the largest asks for.
		jobs, largest, gangGPUsPerPod int
		wantErr                       bool
	}{
		{name: "make bench's gangs", model: "scale-5000.yaml", burst: bench.BurstGangs, jobs: 120, largest: 16 * 8, gangGPUsPerPod: 8},
		{name: "mixed on 100k GPUs", model: "gb200-100k.yaml", burst: bench.BurstMixed, jobs: 1023 + 4032, largest: 4096, gangGPUsPerPod: 4},
		// HGX and GB200 nodes: gang pods ask for the GB200 trays' 4 GPUs;
		// 5,000 nodes hold gangs up to 1,024 GPUs.
		{name: "mixed on two profiles", model: "scale-5000.yaml", burst: bench.BurstMixed, jobs: 255 + 800, largest: 1024, gangGPUsPerPod: 4},
		{name: "unknown burst", model: "hgx-32.yaml", burst: "uniform", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model, err := clustermodel.Load(filepath.Join("..", "..", "test", "e2e", "models", tc.model))
			if err != nil {
				t.Fatal(err)
			}
			jobs, err := inProcessBurst(options{inProcessBurst: tc.burst, scaleGangs: 120}, model)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %t", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			largest := jobs[0]
			for _, j := range jobs {
				if j.GPUs() > largest.GPUs() {
					largest = j
				}
			}
			got := []int{len(jobs), largest.GPUs(), largest.GPUsPerPod}
			if diff := cmp.Diff([]int{tc.jobs, tc.largest, tc.gangGPUsPerPod}, got); diff != "" {
				t.Errorf("jobs, largest job's GPUs, its pods' GPUs (-want,+got):\n%s", diff)
			}
		})
	}
}
