package placement

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

// channelCluster is two NVL72 cliques of GB200 trays (4 GPUs each), one
// channel per tray. In clique 1, tray c1-0 has GPUs 2 and 3 free but its
// channel is another domain's; c1-1 and c1-2 are free. Clique 2's four
// trays are free.
func channelCluster(t *testing.T) *cluster {
	c := newCluster(t)
	c.add("c1-0", "gb200-nvl72", busy(4, 0, 1), at{clique: "1", leaf: "l1"}).Channels = 1
	for _, n := range []string{"c1-1", "c1-2"} {
		node := c.add(n, "gb200-nvl72", busy(4), at{clique: "1", leaf: "l1"})
		node.Channels, node.FreeChannels = 1, 1
	}
	for _, n := range []string{"c2-0", "c2-1", "c2-2", "c2-3"} {
		node := c.add(n, "gb200-nvl72", busy(4), at{clique: "2", leaf: "l2"})
		node.Channels, node.FreeChannels = 1, 1
	}
	return c
}

// TestPlaceChannels checks that members claiming a ComputeDomain channel
// each land on a node of their own with a free channel, and that gangs
// that claim none pack as before.
func TestPlaceChannels(t *testing.T) {
	tests := []struct {
		name string
		gang Gang
		want []string
	}{
		{
			// Clique 1 has room for five 2-GPU members by GPUs, for
			// two by channels: the gang goes to clique 2, a tray each.
			name: "a node apart",
			gang: Gang{Members: 4, GPUsPerMember: 2, Channels: true},
			want: []string{"c2-0", "c2-1", "c2-2", "c2-3"},
		},
		{
			name: "packed without channels",
			gang: Gang{Members: 4, GPUsPerMember: 2},
			want: []string{"c1-1", "c1-1", "c1-2", "c1-2"},
		},
		{
			// c1-0's two free GPUs are behind another domain's channel.
			name: "off a tray another domain holds",
			gang: Gang{Members: 2, GPUsPerMember: 2, Channels: true, Level: lockstep.LevelClique, Mode: lockstep.Required},
			want: []string{"c1-1", "c1-2"},
		},
		{
			name: "one tray without channels",
			gang: Gang{Members: 2, GPUsPerMember: 2, Level: lockstep.LevelClique, Mode: lockstep.Required},
			want: []string{"c1-1", "c1-1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := mustPlace(t, channelCluster(t).snapshot(), tc.gang)
			if d := diff(tc.want, nodesOf(plan)); d != "" {
				t.Errorf("nodes (-want,+got):\n%s", d)
			}
		})
	}
}

// TestPlaceChannelsHeldWait checks that channels other domains hold count
// as free some day, as GPUs in use do: a gang they keep out waits and
// drains the clique that could hold it, with the channels named in its
// reason, while a clique whose trays publish no channel never could.
func TestPlaceChannelsHeldWait(t *testing.T) {
	c := newCluster(t)
	// Clique 1: three trays running another domain's pod each; clique 2:
	// three free trays that publish no channel.
	for _, n := range []string{"c1-0", "c1-1", "c1-2"} {
		c.add(n, "gb200-nvl72", busy(4, 0, 1), at{clique: "1", leaf: "l1"}).Channels = 1
	}
	c.addN("c2", 3, "gb200-nvl72", at{clique: "2", leaf: "l1"})
	_, err := Place(c.snapshot(), Gang{Members: 3, GPUsPerMember: 2, Channels: true, Level: lockstep.LevelClique, Mode: lockstep.Required}, Options{})
	var u *Unschedulable
	if !errors.As(err, &u) {
		t.Fatalf("Place: %v, want *Unschedulable", err)
	}
	if !strings.Contains(u.Reason, "ComputeDomain channels allow 0 members") {
		t.Errorf("reason %q names no ComputeDomain channels", u.Reason)
	}
	if u.Drain == nil || diff([]string{"c1-0", "c1-1", "c1-2"}, u.Drain.Nodes) != "" {
		t.Errorf("drain %+v, want clique 1, which holds the gang once its channels are free", u.Drain)
	}
}

// TestPreemptFreesChannels checks that evicting a lower-priority domain's
// pod frees its node's channel for the preemptor: its GPUs alone would not
// let a channel-claiming gang in.
func TestPreemptFreesChannels(t *testing.T) {
	c := newCluster(t)
	// Each tray runs a 2-GPU pod of a low-priority domain on GPUs 0-1.
	var victims []Victim
	for _, n := range []string{"t-0", "t-1"} {
		c.add(n, "gb200-nvl72", busy(4, 0, 1), at{clique: "1", leaf: "l1"}).Channels = 1
		victims = append(victims, Victim{Key: "ns/low-" + n, Priority: 0, Pods: []VictimPod{{Node: n, GPUs: busy(4, 2, 3), Channels: 1}}})
	}
	p := Preemptor{Gang: Gang{Members: 2, GPUsPerMember: 2, Channels: true, Level: lockstep.LevelClique, Mode: lockstep.Required}, Priority: 10}
	got, err := Preempt(c.snapshot(), p, victims)
	if err != nil {
		t.Fatalf("Preempt: %v", err)
	}
	var keys []string
	for _, v := range got.Victims {
		keys = append(keys, v.Key)
	}
	if d := diff([]string{"ns/low-t-0", "ns/low-t-1"}, keys); d != "" {
		t.Errorf("victims (-want,+got):\n%s", d)
	}
	if d := diff([]string{"t-0", "t-1"}, nodesOf(got.Plan)); d != "" {
		t.Errorf("plan nodes (-want,+got):\n%s", d)
	}
}
