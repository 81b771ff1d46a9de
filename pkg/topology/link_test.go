package topology

import (
	"encoding/json"
	"testing"
)

func TestParseTopoToken(t *testing.T) {
	tests := []struct {
		tok     string
		want    Link
		wantErr bool
	}{
		{tok: "NV18", want: Link{Class: LinkNVLink, NVLinks: 18}},
		{tok: "NV1", want: Link{Class: LinkNVLink, NVLinks: 1}},
		{tok: " NV12\t", want: Link{Class: LinkNVLink, NVLinks: 12}},
		{tok: "PIX", want: Link{Class: LinkSameSwitch}},
		{tok: "PXB", want: Link{Class: LinkMultiSwitch}},
		{tok: "PHB", want: Link{Class: LinkHostBridge}},
		{tok: "NODE", want: Link{Class: LinkSameNUMA}},
		{tok: "SYS", want: Link{Class: LinkCrossNUMA}},
		{tok: "X", wantErr: true},
		{tok: "NV0", wantErr: true},
		{tok: "NV012", wantErr: true},
		{tok: "NV+1", wantErr: true},
		{tok: "NV99999999999999999999", wantErr: true},
		{tok: "NVLink", wantErr: true},
		{tok: "NVSwitch", wantErr: true},
		{tok: "pix", wantErr: true},
		{tok: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.tok, func(t *testing.T) {
			got, err := ParseTopoToken(tt.tok)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseTopoToken(%q) error = %v, wantErr %v", tt.tok, err, tt.wantErr)
			}
			if d := diff(tt.want, got); d != "" {
				t.Errorf("ParseTopoToken(%q) (-want,+got):\n%s", tt.tok, d)
			}
		})
	}
}

func TestLinkToken(t *testing.T) {
	tests := []struct {
		link Link
		want string
	}{
		{Link{Class: LinkNVSwitch, NVLinks: 18, GBps: 450}, "NV18"},
		{Link{Class: LinkNVLink, NVLinks: 2, GBps: 50}, "NV2"},
		{Link{Class: LinkSameSwitch, GBps: 25}, "PIX"},
		{Link{Class: LinkCrossNUMA, GBps: 14}, "SYS"},
	}
	for _, tt := range tests {
		if got := tt.link.Token(); got != tt.want {
			t.Errorf("%+v.Token() = %q, want %q", tt.link, got, tt.want)
		}
	}
}

func TestLinkClassJSONRoundTrip(t *testing.T) {
	for c := LinkCrossNUMA; c <= LinkNVSwitch; c++ {
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal(%v): %v", c, err)
		}
		var got LinkClass
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("Unmarshal(%s): %v", data, err)
		}
		if got != c {
			t.Errorf("round trip of %v gave %v via %s", c, got, data)
		}
	}
	if _, err := json.Marshal(LinkUnknown); err == nil {
		t.Error("Marshal(LinkUnknown) succeeded, want an error")
	}
}

func TestLinkClassOrder(t *testing.T) {
	// Nearest-NIC selection relies on PCIe classes growing closer.
	order := []LinkClass{LinkCrossNUMA, LinkSameNUMA, LinkHostBridge, LinkMultiSwitch, LinkSameSwitch}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Errorf("%v <= %v: PCIe classes must order from far to near", order[i], order[i-1])
		}
	}
}

// FuzzParseTopoToken checks that the parser never panics and that whatever it
// accepts prints back as a token that parses to the same link.
func FuzzParseTopoToken(f *testing.F) {
	for _, seed := range []string{"NV18", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS", " X ", "NV", "NV0", "NV-1", "NV١"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		l, err := ParseTopoToken(tok)
		if err != nil {
			return
		}
		again, err := ParseTopoToken(l.Token())
		if err != nil {
			t.Fatalf("ParseTopoToken(%q) = %+v, but its token %q does not parse: %v", tok, l, l.Token(), err)
		}
		if again != l {
			t.Fatalf("token round trip (-want,+got):\n%s", diff(l, again))
		}
	})
}

// FuzzLinkClassText checks that UnmarshalText accepts exactly what
// MarshalText writes.
func FuzzLinkClassText(f *testing.F) {
	for _, seed := range []string{"NVLink", "NVSwitch", "PIX", "SYS", "", "nvlink"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var c LinkClass
		if err := c.UnmarshalText([]byte(s)); err != nil {
			return
		}
		out, err := c.MarshalText()
		if err != nil || string(out) != s {
			t.Fatalf("UnmarshalText(%q) = %v, MarshalText = %q, %v", s, c, out, err)
		}
	})
}
