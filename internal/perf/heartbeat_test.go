package perf

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockstep-dev/lockstep/pkg/apis/lockstep/v1alpha1"
)

func TestScaleTopologyMaxAge(t *testing.T) {
	profile := func(args map[string]any) map[string]any {
		return map[string]any{"pluginConfig": []any{
			map[string]any{"name": "NodeResourcesFit", "args": map[string]any{"topologyMaxAge": "1m"}},
			map[string]any{"name": "TopologyPlacement", "args": args},
		}}
	}
	tests := []struct {
		name    string
		args    []map[string]any
		factor  time.Duration
		want    []map[string]any
		wantErr bool
	}{
		{name: "5,000 nodes keep deploy/'s", args: []map[string]any{{"topologyMaxAge": "5m"}}, factor: 1,
			want: []map[string]any{{"topologyMaxAge": "5m0s"}}},
		{name: "25,200 nodes, every profile", args: []map[string]any{{"topologyMaxAge": "5m", "preferredWait": "30s"}, {"topologyMaxAge": "2m"}}, factor: 6,
			want: []map[string]any{{"topologyMaxAge": "30m0s", "preferredWait": "30s"}, {"topologyMaxAge": "12m0s"}}},
		{name: "the check off stays off", args: []map[string]any{{"topologyMaxAge": "0s"}}, factor: 6,
			want: []map[string]any{{"topologyMaxAge": "0s"}}},
		{name: "unset stays unset", args: []map[string]any{{"preferredWait": "30s"}}, factor: 6,
			want: []map[string]any{{"preferredWait": "30s"}}},
		{name: "not a duration", args: []map[string]any{{"topologyMaxAge": "five"}}, factor: 6, wantErr: true,
			want: []map[string]any{{"topologyMaxAge": "five"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var profiles, want []any
			for i := range tc.args {
				profiles = append(profiles, profile(tc.args[i]))
				want = append(want, profile(tc.want[i]))
			}
			cfg := map[string]any{"profiles": profiles}
			err := scaleTopologyMaxAge(cfg, tc.factor)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %t", err, tc.wantErr)
			}
			// Other plugins' args are left alone.
			if diff := cmp.Diff(map[string]any{"profiles": want}, cfg); diff != "" {
				t.Errorf("config (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestHeartbeat checks that heartbeat moves every NodeTopology's heartbeat
// forward and changes nothing else.
func TestHeartbeat(t *testing.T) {
	root, model := smallModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := start(ctx, Config{Root: root, Model: model})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.stop(); err != nil {
			t.Error(err)
		}
	}()
	if err := e.writeNodes(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.publishTopology(ctx); err != nil {
		t.Fatal(err)
	}
	before := &v1alpha1.NodeTopologyList{}
	if err := e.client.List(ctx, before); err != nil {
		t.Fatal(err)
	}
	// Heartbeats are written to the second: two seconds on, the time moves.
	if err := e.heartbeat(ctx, time.Now().Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, was := range before.Items {
		now := &v1alpha1.NodeTopology{}
		if err := e.client.Get(ctx, client.ObjectKeyFromObject(&was), now); err != nil {
			t.Fatal(err)
		}
		if !now.Status.HeartbeatTime.After(was.Status.HeartbeatTime.Time) || now.Status.HeartbeatTime.Time.Before(e.published.Truncate(time.Second)) {
			t.Errorf("%s: heartbeat %s after one at %s, want it moved to %s", was.Name, now.Status.HeartbeatTime, was.Status.HeartbeatTime, e.published)
		}
		now.Status.HeartbeatTime = was.Status.HeartbeatTime
		if diff := cmp.Diff(was.Spec, now.Spec); diff != "" {
			t.Errorf("%s: spec (-before,+after):\n%s", was.Name, diff)
		}
		if diff := cmp.Diff(was.Status, now.Status); diff != "" {
			t.Errorf("%s: status besides the heartbeat (-before,+after):\n%s", was.Name, diff)
		}
	}
}
