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
