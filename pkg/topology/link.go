package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// LinkClass is how two devices of a node are connected. The PCIe classes
// mirror the tokens of `nvidia-smi topo -m`; the two NVLink classes both print
// as NV# there but differ for placement: a direct NVLink only joins its two
// GPUs, while an NVSwitch gives every GPU pair the same bandwidth.
//
// Among PCIe classes a larger value is a closer path, so classes can be
// compared to find the nearest device.
type LinkClass uint8

const (
	// LinkUnknown is the zero value; it is invalid between two devices.
	LinkUnknown LinkClass = iota
	// LinkCrossNUMA traverses PCIe and the SMP interconnect between NUMA
	// nodes (QPI/UPI/xGMI); cross-socket on a two-socket server. nvidia-smi: SYS.
	LinkCrossNUMA
	// LinkSameNUMA traverses PCIe and the interconnect between PCIe host
	// bridges within one NUMA node. nvidia-smi: NODE.
	LinkSameNUMA
	// LinkHostBridge traverses PCIe and one PCIe host bridge (the CPU).
	// nvidia-smi: PHB.
	LinkHostBridge
	// LinkMultiSwitch traverses several PCIe bridges without the host bridge.
	// nvidia-smi: PXB.
	LinkMultiSwitch
	// LinkSameSwitch traverses at most one PCIe bridge. nvidia-smi: PIX.
	LinkSameSwitch
	// LinkNVLink is a bonded set of direct NVLinks between the two GPUs.
	// nvidia-smi: NV#.
	LinkNVLink
	// LinkNVSwitch reaches the other GPU through NVSwitch chips (on the
	// baseboard or, for multi-node NVLink, in switch trays). nvidia-smi: NV#
	// with # the links each GPU has into the switches.
	LinkNVSwitch
)

// linkClassName returns the name used by String, MarshalText and ParseLinkClass;
// PCIe classes use the nvidia-smi tokens operators already know.
func linkClassName(c LinkClass) string {
	switch c {
	case LinkCrossNUMA:
		return "SYS"
	case LinkSameNUMA:
		return "NODE"
	case LinkHostBridge:
		return "PHB"
	case LinkMultiSwitch:
		return "PXB"
	case LinkSameSwitch:
		return "PIX"
	case LinkNVLink:
		return "NVLink"
	case LinkNVSwitch:
		return "NVSwitch"
	default:
		return ""
	}
}

// String returns the class name: SYS, NODE, PHB, PXB, PIX, NVLink or NVSwitch.
func (c LinkClass) String() string {
	if name := linkClassName(c); name != "" {
		return name
	}
	return fmt.Sprintf("LinkClass(%d)", uint8(c))
}

// IsNVLink reports whether the class carries traffic over NVLink.
func (c LinkClass) IsNVLink() bool { return c == LinkNVLink || c == LinkNVSwitch }

// IsPCIe reports whether the class is one of the PCIe paths (PIX to SYS).
func (c LinkClass) IsPCIe() bool { return c >= LinkCrossNUMA && c <= LinkSameSwitch }

// ParseLinkClass is the inverse of LinkClass.String.
func ParseLinkClass(s string) (LinkClass, error) {
	for c := LinkCrossNUMA; c <= LinkNVSwitch; c++ {
		if linkClassName(c) == s {
			return c, nil
		}
	}
	return LinkUnknown, fmt.Errorf("unknown link class %q: want one of SYS, NODE, PHB, PXB, PIX, NVLink, NVSwitch", s)
}

// MarshalText encodes the class by name so API objects stay readable.
func (c LinkClass) MarshalText() ([]byte, error) {
	name := linkClassName(c)
	if name == "" {
		return nil, fmt.Errorf("cannot marshal %v", c)
	}
	return []byte(name), nil
}

// UnmarshalText decodes a name written by MarshalText.
func (c *LinkClass) UnmarshalText(text []byte) error {
	parsed, err := ParseLinkClass(string(text))
	if err != nil {
		return err
	}
	*c = parsed
	return nil
}

// Link is the connection between two GPUs of a node.
type Link struct {
	Class LinkClass
	// NVLinks is the number of NVLink links bonded between the pair
	// (LinkNVLink) or the number each GPU has into the switches
	// (LinkNVSwitch); zero for PCIe classes.
	NVLinks int
	// GBps is the usable bandwidth in one direction, in GB/s (10^9 bytes/s).
	GBps float64
}

// Token returns the cell `nvidia-smi topo -m` prints for the link: NV#, PIX,
// PXB, PHB, NODE or SYS.
func (l Link) Token() string {
	if l.Class.IsNVLink() {
		return "NV" + strconv.Itoa(l.NVLinks)
	}
	return l.Class.String()
}

// String returns the token and the bandwidth, e.g. "NV18 450GB/s".
func (l Link) String() string {
	return fmt.Sprintf("%s %gGB/s", l.Token(), l.GBps)
}

// maxNVLinks bounds NV# tokens. NVLink5 GPUs have 18 links; the slack keeps
// future parts parseable while rejecting nonsense such as NV99999999999.
const maxNVLinks = 64

// ParseTopoToken parses one GPU-to-GPU cell of `nvidia-smi topo -m`. NV# is
// returned as LinkNVLink because the token does not say whether an NVSwitch
// is in the path; GBps is left zero because the token carries no bandwidth.
func ParseTopoToken(tok string) (Link, error) {
	tok = strings.TrimSpace(tok)
	if rest, ok := strings.CutPrefix(tok, "NV"); ok && rest != "" && rest[0] >= '0' && rest[0] <= '9' {
		n, err := strconv.Atoi(rest)
		if err != nil || n < 1 || n > maxNVLinks || strconv.Itoa(n) != rest {
			return Link{}, fmt.Errorf("invalid NVLink token %q: want NV1 to NV%d", tok, maxNVLinks)
		}
		return Link{Class: LinkNVLink, NVLinks: n}, nil
	}
	c, err := ParseLinkClass(tok)
	if err != nil || !c.IsPCIe() {
		return Link{}, fmt.Errorf("invalid topology token %q: want NV#, PIX, PXB, PHB, NODE or SYS", tok)
	}
	return Link{Class: c}, nil
}
