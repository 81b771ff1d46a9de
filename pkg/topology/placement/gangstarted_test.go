package placement

import (
	"testing"
	"time"
)

func TestGangStarted(t *testing.T) {
	at := func(s int64) time.Time { return time.Unix(s, 0) }
	tests := []struct {
		name      string
		starts    []time.Time
		minMember int
		want      time.Time
	}{
		{name: "no member runs", minMember: 2},
		{name: "fewer than minMember run", starts: []time.Time{at(10)}, minMember: 2},
		{name: "every member runs: the last start", starts: []time.Time{at(30), at(10), at(20)}, minMember: 3, want: at(30)},
		{name: "pending members beyond minMember: the minMember-th start", starts: []time.Time{at(30), at(10), at(20), at(90)}, minMember: 2, want: at(20)},
		{name: "minMember 0 counts as 1", starts: []time.Time{at(50), at(40)}, want: at(40)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := GangStarted(tc.starts, tc.minMember); !got.Equal(tc.want) {
				t.Errorf("GangStarted = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLostWorkNoticed(t *testing.T) {
	at := func(s int64) time.Time { return time.Unix(s, 0) }
	tests := []struct {
		name             string
		victim           Victim
		noticed, evicted time.Time
		want             time.Duration
	}{
		{name: "no notice: since the checkpoint", victim: Victim{Started: at(0), Checkpointed: at(100)}, evicted: at(160), want: 60 * time.Second},
		{name: "answered: the time spent saving since the notice", victim: Victim{Started: at(0), Checkpointed: at(1010)}, noticed: at(1000), evicted: at(1010), want: 10 * time.Second},
		{name: "answered, plus the restart overhead", victim: Victim{Started: at(0), Checkpointed: at(1010), RestartOverhead: time.Minute}, noticed: at(1000), evicted: at(1012), want: 72 * time.Second},
		{name: "not answered: since the checkpoint before the notice", victim: Victim{Started: at(0), Checkpointed: at(400)}, noticed: at(1000), evicted: at(1060), want: 660 * time.Second},
		{name: "never checkpointed, not answered: since the start", victim: Victim{Started: at(500)}, noticed: at(1000), evicted: at(1060), want: 560 * time.Second},
		{name: "a checkpoint at the notice's instant answers it", victim: Victim{Started: at(0), Checkpointed: at(1000)}, noticed: at(1000), evicted: at(1005), want: 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.victim.LostWorkNoticed(tc.noticed, tc.evicted); got != tc.want {
				t.Errorf("LostWorkNoticed = %v, want %v", got, tc.want)
			}
		})
	}
}
