package topologyplacement

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/lockstep-dev/lockstep/pkg/lockstep"
)

func TestDecodeArgs(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		check   func(*testing.T, *Args)
		wantErr string
	}{
		{
			name: "defaults",
			raw:  "",
			check: func(t *testing.T, a *Args) {
				if diff := cmp.Diff([]string{"clique", "leaf", "spine", "block"}, levelNames(a)); diff != "" {
					t.Errorf("levels (-want,+got):\n%s", diff)
				}
				if a.DefaultMode != lockstep.Preferred || a.PreferredWait.Duration != 30*time.Second || a.PlanTTL.Duration != 90*time.Second || a.Unconstrained != TightestFirst {
					t.Errorf("defaults = %+v", a)
				}
			},
		},
		{
			name: "custom levels and oversubscription",
			raw:  `{"levels":[{"name":"rack","nodeLabel":"example.com/rack"}],"oversubscription":{"rack":2},"defaultMode":"Required"}`,
			check: func(t *testing.T, a *Args) {
				if len(a.Levels) != 1 || a.Levels[0].LabelKey != "example.com/rack" || a.DefaultMode != lockstep.Required {
					t.Errorf("args = %+v", a)
				}
			},
		},
		{name: "bad mode", raw: `{"defaultMode":"Sometimes"}`, wantErr: `args.defaultMode: Unsupported value: "Sometimes"`},
		{name: "bad unconstrained placement", raw: `{"unconstrained":"Tightest"}`, wantErr: `args.unconstrained: Unsupported value: "Tightest": supported values: "TightestFirst", "Anywhere"`},
		{
			name: "unconstrained gangs placed anywhere",
			raw:  `{"unconstrained":"Anywhere"}`,
			check: func(t *testing.T, a *Args) {
				if a.Unconstrained != Anywhere {
					t.Errorf("unconstrained = %q, want Anywhere", a.Unconstrained)
				}
			},
		},
		{name: "reserved level name", raw: `{"levels":[{"name":"host","nodeLabel":"a/b"}]}`, wantErr: "args.levels[0].name"},
		{name: "bad label key", raw: `{"levels":[{"name":"rack","nodeLabel":"not a key"}]}`, wantErr: "args.levels[0].nodeLabel"},
		{name: "oversubscription of an unknown level", raw: `{"oversubscription":{"pod":2}}`, wantErr: "args.oversubscription[pod]"},
		{name: "oversubscription below 1", raw: `{"oversubscription":{"leaf":0.5}}`, wantErr: "must be at least 1"},
		{name: "negative gang score weight", raw: `{"gangScoreWeight":-1}`, wantErr: "args.gangScoreWeight: Invalid value: -1"},
		{name: "negative NVLink score weight", raw: `{"nvlinkScoreWeight":-1}`, wantErr: "args.nvlinkScoreWeight: Invalid value: -1"},
		{name: "negative wait", raw: `{"preferredWait":"-1s"}`, wantErr: "args.preferredWait"},
		{name: "unknown field", raw: `{"levelz":[]}`, wantErr: "levelz"},
		{name: "negative topologyMaxAge", raw: `{"topologyMaxAge":"-1m"}`, wantErr: "args.topologyMaxAge"},
		{name: "negative preemptionMinRuntime", raw: `{"preemptionMinRuntime":"-5m"}`, wantErr: `args.preemptionMinRuntime: Invalid value: "-5m0s": must not be negative`},
		{
			name: "preemptionMinRuntime off by default, set",
			raw:  `{"planTTL":"90s"}`,
			check: func(t *testing.T, a *Args) {
				if a.PreemptionMinRuntime.Duration != 0 {
					t.Errorf("preemptionMinRuntime = %v, want 0 (off)", a.PreemptionMinRuntime.Duration)
				}
				got, err := decodeArgs(&runtime.Unknown{Raw: []byte(`{"preemptionMinRuntime":"10m"}`), ContentType: runtime.ContentTypeJSON})
				if err != nil || got.PreemptionMinRuntime.Duration != 10*time.Minute {
					t.Errorf("preemptionMinRuntime %v, %v; want 10m", got.PreemptionMinRuntime.Duration, err)
				}
			},
		},
		{
			name: "topologyMaxAge default, set, and 0 to disable",
			raw:  `{"planTTL":"90s"}`,
			check: func(t *testing.T, a *Args) {
				if a.maxAge() != DefaultTopologyMaxAge {
					t.Errorf("topologyMaxAge = %v, want the default %v", a.maxAge(), DefaultTopologyMaxAge)
				}
				for raw, want := range map[string]time.Duration{`{"topologyMaxAge":"90s"}`: 90 * time.Second, `{"topologyMaxAge":"0s"}`: 0} {
					got, err := decodeArgs(&runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON})
					if err != nil || got.maxAge() != want {
						t.Errorf("%s: maxAge %v, %v; want %v", raw, got.maxAge(), err, want)
					}
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var obj runtime.Object
			if tc.raw != "" {
				obj = &runtime.Unknown{Raw: []byte(tc.raw), ContentType: runtime.ContentTypeJSON}
			}
			args, err := decodeArgs(obj)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("decodeArgs error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, args)
		})
	}
}

func levelNames(a *Args) []string {
	var out []string
	for _, l := range a.Levels {
		out = append(out, l.Name)
	}
	return out
}
