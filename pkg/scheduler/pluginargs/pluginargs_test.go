package pluginargs

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type args struct {
	Timeout int      `json:"timeout,omitempty"`
	Levels  []string `json:"levels,omitempty"`
}

func TestDecodeStrict(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		want args
		// wantErr is a part of the error, "" for none.
		wantErr string
	}{
		{name: "empty", data: ""},
		{name: "YAML", data: "timeout: 30\nlevels: [leaf, spine]\n", want: args{Timeout: 30, Levels: []string{"leaf", "spine"}}},
		{name: "JSON", data: `{"timeout": 30}`, want: args{Timeout: 30}},
		{name: "unknown field", data: "timeoutt: 30\n", wantErr: `unknown field "timeoutt"`},
		{name: "duplicate key in JSON", data: `{"timeout": 30, "timeout": 40}`, wantErr: `"timeout" already set`},
		{name: "duplicate key in YAML", data: "timeout: 30\ntimeout: 40\n", wantErr: `"timeout" already set`},
		{name: "wrong type", data: "timeout: soon\n", wantErr: "cannot unmarshal"},
		{name: "not YAML", data: "timeout: [\n", wantErr: "yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got args
			err := DecodeStrict([]byte(tc.data), &got)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("DecodeStrict(%q) error = %v, want one containing %q", tc.data, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecodeStrict(%q) (-want,+got):\n%s", tc.data, diff)
			}
		})
	}
}
