package fabric

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// NodeType is the kind of an InfiniBand node.
type NodeType uint8

// Node types as ibnetdiscover names them: "Switch"/"S-", "Ca"/"H-", "Rt"/"R-".
const (
	NodeSwitch NodeType = iota + 1
	NodeCA
	NodeRouter
)

func (t NodeType) String() string {
	switch t {
	case NodeSwitch:
		return "Switch"
	case NodeCA:
		return "Ca"
	case NodeRouter:
		return "Rt"
	}
	return "unknown"
}

// prefix is the letter ibnetdiscover puts before a node's GUID in quotes.
func (t NodeType) prefix() string {
	switch t {
	case NodeSwitch:
		return "S"
	case NodeCA:
		return "H"
	case NodeRouter:
		return "R"
	}
	return "?"
}

// Node is one switch, channel adapter or router of the fabric.
type Node struct {
	Type NodeType
	// GUID is the node GUID: 16 lowercase hex digits without "0x".
	GUID string
	// Description is the node description between the quotes.
	Description string
	// Ports is the port count from the node's header; 0 for a node known
	// only from a peer's port line.
	Ports int
	// Line is the line of the node's header; 0 for a node known only from a
	// peer's port line.
	Line int
	// Links are the node's cabled ports in the order listed.
	Links []Link
}

// ID is the quoted name ibnetdiscover gives the node, e.g. "S-0002c90300a1b2c3".
func (n *Node) ID() string { return n.Type.prefix() + "-" + n.GUID }

// Link is one port line: a cable from a port of the node to a peer's port.
type Link struct {
	Port     int
	Peer     string // peer node GUID
	PeerType NodeType
	PeerPort int
	// Width and Speed are the active link width and speed, e.g. "4x" and
	// "NDR"; empty when the line omits them.
	Width, Speed string
	Line         int
}

// Fabric is a parsed ibnetdiscover topology.
type Fabric struct {
	nodes map[string]*Node // by GUID
}

// Node returns the node with the given GUID (16 hex digits), or nil.
func (f *Fabric) Node(guid string) *Node { return f.nodes[guid] }

// Nodes returns every node, sorted by GUID.
func (f *Fabric) Nodes() []*Node {
	nodes := make([]*Node, 0, len(f.nodes))
	for _, n := range f.nodes {
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b *Node) int { return strings.Compare(a.GUID, b.GUID) })
	return nodes
}

// ParseError reports malformed ibnetdiscover input and where it is.
type ParseError struct {
	Line int // 1-based; 0 when the problem is the input as a whole
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return "ibnetdiscover: " + e.Msg
	}
	return fmt.Sprintf("ibnetdiscover line %d: %s", e.Line, e.Msg)
}

// maxLineBytes bounds one input line; real lines are under 200 bytes, node
// descriptions being at most 64.
const maxLineBytes = 1 << 20

// maxPort is the largest port number InfiniBand allows (ports are 8 bits and
// 255 is reserved).
const maxPort = 254

// ParseIBNetDiscover reads the topology that ibnetdiscover prints (plain, or
// with -g grouping or -f full information; "ibwarn:" lines of a captured
// stderr are skipped) and
// returns its nodes and cables. Cables are listed from both ends; a node
// that appears only as a peer (a truncated or filtered file) is still added,
// with the description the peer's line gives it.
//
// Malformed input returns a *ParseError naming the line.
func ParseIBNetDiscover(r io.Reader) (*Fabric, error) {
	p := ibnetdiscoverParser{nodes: make(map[string]*Node)}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxLineBytes)
	line := 0
	for sc.Scan() {
		line++
		if err := p.parseLine(line, strings.TrimRight(sc.Text(), "\r")); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &ParseError{Line: line + 1, Msg: fmt.Sprintf("line longer than %d bytes", maxLineBytes)}
		}
		return nil, fmt.Errorf("reading ibnetdiscover output: %w", err)
	}
	return p.finish()
}

type ibnetdiscoverParser struct {
	nodes   map[string]*Node
	current *Node        // node whose port lines follow
	ports   map[int]bool // ports of current already listed
	// peerDescriptions remembers how port lines describe peers, for nodes
	// the file never gives a header.
	peerDescriptions map[string]string
}

// nodeIDKeys start the "key=value" lines printed before each node header.
var nodeIDKeys = []string{"vendid", "devid", "sysimgguid", "switchguid", "caguid", "rtguid"}

func (p *ibnetdiscoverParser) parseLine(line int, text string) error {
	trimmed := strings.TrimSpace(text)
	switch {
	case trimmed == "":
		p.endNode()
		return nil
	case strings.HasPrefix(trimmed, "#"):
		return nil
	case strings.HasPrefix(trimmed, "["):
		return p.parsePortLine(line, trimmed)
	}
	keyword, _, _ := strings.Cut(trimmed, "=")
	if keyword != trimmed && slices.Contains(nodeIDKeys, keyword) {
		p.endNode()
		return nil
	}
	keyword = firstField(trimmed)
	switch keyword {
	case "Switch":
		return p.parseNodeHeader(line, trimmed, NodeSwitch)
	case "Ca":
		return p.parseNodeHeader(line, trimmed, NodeCA)
	case "Rt":
		return p.parseNodeHeader(line, trimmed, NodeRouter)
	case "Chassis", "Hostname:", "Non-Chassis":
		// -g grouping headers; the nodes under them are printed as usual.
		p.endNode()
		return nil
	case "ibwarn:":
		// A diagnostic from libibmad, in output captured with 2>&1.
		return nil
	}
	return &ParseError{Line: line, Msg: fmt.Sprintf("unrecognised line %s: expected a node header (Switch, Ca, Rt), a port line ([n] ...), key=value or a # comment", quoteSnippet(trimmed))}
}

func (p *ibnetdiscoverParser) endNode() {
	p.current = nil
	p.ports = nil
}

// parseNodeHeader reads
//
//	Switch	<ports> "S-<guid>"		# "<description>" enhanced port 0 lid <lid> lmc <lmc>
//	Ca	<ports> "H-<guid>"		# "<description>"
//
// Anything after the description is left alone: it varies between versions.
func (p *ibnetdiscoverParser) parseNodeHeader(line int, text string, typ NodeType) error {
	c := cursor{s: text}
	c.consumeWord()
	c.skipSpace()
	ports, ok := c.number(maxPort)
	if !ok {
		return &ParseError{Line: line, Msg: fmt.Sprintf("%s header: expected a port count (1-%d) after %q, found %s", typ, maxPort, typ.String(), quoteSnippet(c.rest()))}
	}
	c.skipSpace()
	refType, guid, err := c.nodeRef()
	if err != nil {
		return &ParseError{Line: line, Msg: fmt.Sprintf("%s header: %v", typ, err)}
	}
	if refType != typ {
		return &ParseError{Line: line, Msg: fmt.Sprintf("%s header names %q, which is a %s", typ, refType.prefix()+"-"+guid, refType)}
	}
	c.skipSpace()
	if !c.consume("#") {
		return &ParseError{Line: line, Msg: fmt.Sprintf("%s header: expected # \"<description>\" after the GUID, found %s", typ, quoteSnippet(c.rest()))}
	}
	c.skipSpace()
	desc, ok := c.quotedToLastQuote()
	if !ok {
		return &ParseError{Line: line, Msg: fmt.Sprintf("%s header: expected a quoted node description, found %s", typ, quoteSnippet(c.rest()))}
	}
	if prev, dup := p.nodes[guid]; dup {
		return &ParseError{Line: line, Msg: fmt.Sprintf("node %s is listed twice (first on line %d)", prev.ID(), prev.Line)}
	}
	n := &Node{Type: typ, GUID: guid, Description: desc, Ports: ports, Line: line}
	p.nodes[guid] = n
	p.current = n
	p.ports = make(map[int]bool)
	return nil
}

// parsePortLine reads a cable from the current node, one of
//
//	[<port>]	"H-<guid>"[<port>](<portguid>) 		# "<description>" lid <lid> 4xHDR
//	[<port>]	"S-<guid>"[<port>]		# "<description>" lid <lid> 4xHDR
//	[<port>](<portguid>) 	"S-<guid>"[<port>]		# lid <lid> lmc <lmc> "<description>" lid <lid> 4xHDR
//
// with an optional "[ext <n>]" after either port number (-g) and optional
// words after the speed (-f "s= w= v=", "slot <n>", "(scp)").
func (p *ibnetdiscoverParser) parsePortLine(line int, text string) error {
	if p.current == nil {
		return &ParseError{Line: line, Msg: "port line outside a Switch, Ca or Rt block"}
	}
	owner := p.current
	c := cursor{s: text}
	port, ok := c.bracketNumber(maxPort)
	if !ok || port == 0 {
		return &ParseError{Line: line, Msg: fmt.Sprintf("expected a port number [1-%d] at the start of the line, found %s", maxPort, quoteSnippet(text))}
	}
	if owner.Ports > 0 && port > owner.Ports {
		return &ParseError{Line: line, Msg: fmt.Sprintf("port %d is beyond the %d ports of %s", port, owner.Ports, owner.ID())}
	}
	if p.ports[port] {
		return &ParseError{Line: line, Msg: fmt.Sprintf("port %d of %s is listed twice", port, owner.ID())}
	}
	c.extPort()
	if c.peek() == '(' {
		if _, ok := c.parenHex(); !ok {
			return &ParseError{Line: line, Msg: fmt.Sprintf("expected (<port GUID>) after [%d], found %s", port, quoteSnippet(c.rest()))}
		}
	}
	c.skipSpace()
	peerType, peer, err := c.nodeRef()
	if err != nil {
		return &ParseError{Line: line, Msg: fmt.Sprintf("port %d: %v", port, err)}
	}
	peerPort, ok := c.bracketNumber(maxPort)
	if !ok || peerPort == 0 {
		return &ParseError{Line: line, Msg: fmt.Sprintf("port %d: expected the peer's port number [1-%d] after %q, found %s", port, maxPort, peerType.prefix()+"-"+peer, quoteSnippet(c.rest()))}
	}
	c.extPort()
	c.skipSpace()
	if c.peek() == '(' {
		if _, ok := c.parenHex(); !ok {
			return &ParseError{Line: line, Msg: fmt.Sprintf("port %d: expected (<peer port GUID>), found %s", port, quoteSnippet(c.rest()))}
		}
		c.skipSpace()
	}
	if !c.consume("#") {
		return &ParseError{Line: line, Msg: fmt.Sprintf("port %d: expected # and the peer's description, found %s", port, quoteSnippet(c.rest()))}
	}
	c.skipSpace()
	if c.consumeWordIf("lid") {
		// A Ca or Rt port line starts its comment with its own lid and lmc.
		if !c.skipSpace() || !c.digits() || !c.skipSpace() || !c.consumeWordIf("lmc") || !c.skipSpace() || !c.digits() {
			return &ParseError{Line: line, Msg: fmt.Sprintf("port %d: expected \"lid <n> lmc <n>\" before the peer's description, found %s", port, quoteSnippet(c.rest()))}
		}
		c.skipSpace()
	}
	desc, ok := c.quotedToLastQuote()
	if !ok {
		return &ParseError{Line: line, Msg: fmt.Sprintf("port %d: expected the peer's quoted description, found %s", port, quoteSnippet(c.rest()))}
	}
	width, speed, err := parseLinkTail(c.rest())
	if err != nil {
		return &ParseError{Line: line, Msg: fmt.Sprintf("port %d: %v", port, err)}
	}
	p.ports[port] = true
	owner.Links = append(owner.Links, Link{
		Port: port, Peer: peer, PeerType: peerType, PeerPort: peerPort,
		Width: width, Speed: speed, Line: line,
	})
	if p.peerDescriptions == nil {
		p.peerDescriptions = make(map[string]string)
	}
	if _, seen := p.peerDescriptions[peer]; !seen {
		p.peerDescriptions[peer] = desc
	}
	return nil
}

// parseLinkTail reads what follows the peer's description: "lid <n>" and
// the active width and speed ("4xNDR", "2xHDR", "4x???" for an unknown
// speed). Later words are ignored.
func parseLinkTail(tail string) (width, speed string, err error) {
	words := strings.Fields(tail)
	if len(words) == 0 {
		return "", "", nil
	}
	if words[0] != "lid" {
		return "", "", fmt.Errorf("expected \"lid <n>\" after the peer's description, found %s", quoteSnippet(tail))
	}
	if len(words) < 2 || !isDigits(words[1]) {
		return "", "", fmt.Errorf("expected a number after \"lid\", found %s", quoteSnippet(tail))
	}
	if len(words) < 3 {
		return "", "", nil
	}
	w, s, ok := splitWidthSpeed(words[2])
	if !ok {
		return "", "", nil // e.g. a -f word; ibnetdiscover always prints the width first, so nothing lost
	}
	return w, s, nil
}

// splitWidthSpeed splits "4xNDR" into "4x" and "NDR".
func splitWidthSpeed(word string) (width, speed string, ok bool) {
	i := 0
	for i < len(word) && word[i] >= '0' && word[i] <= '9' {
		i++
	}
	if i == 0 || i >= len(word) || word[i] != 'x' {
		if strings.HasPrefix(word, "??") { // width unknown to this ibnetdiscover
			return word[:2], word[2:], true
		}
		return "", "", false
	}
	return word[:i+1], word[i+1:], true
}

// finish adds nodes known only as peers and checks that every cable agrees
// with the type of the node at its far end.
func (p *ibnetdiscoverParser) finish() (*Fabric, error) {
	if len(p.nodes) == 0 {
		return nil, &ParseError{Msg: "no Switch, Ca or Rt blocks found; is this ibnetdiscover's topology output?"}
	}
	defined := make([]*Node, 0, len(p.nodes))
	for _, n := range p.nodes {
		defined = append(defined, n)
	}
	slices.SortFunc(defined, func(a, b *Node) int { return a.Line - b.Line })
	for _, n := range defined {
		for _, l := range n.Links {
			peer, ok := p.nodes[l.Peer]
			if !ok {
				peer = &Node{Type: l.PeerType, GUID: l.Peer, Description: p.peerDescriptions[l.Peer]}
				p.nodes[l.Peer] = peer
			}
			if peer.Type != l.PeerType {
				where := "elsewhere"
				if peer.Line > 0 {
					where = fmt.Sprintf("on line %d", peer.Line)
				}
				return nil, &ParseError{Line: l.Line, Msg: fmt.Sprintf("peer %s-%s is a %s %s", l.PeerType.prefix(), l.Peer, peer.Type, where)}
			}
		}
	}
	return &Fabric{nodes: p.nodes}, nil
}

// cursor walks one line.
type cursor struct {
	s   string
	pos int
}

func (c *cursor) rest() string { return c.s[c.pos:] }

func (c *cursor) peek() byte {
	if c.pos < len(c.s) {
		return c.s[c.pos]
	}
	return 0
}

// skipSpace skips blanks and reports whether there were any.
func (c *cursor) skipSpace() bool {
	start := c.pos
	for c.pos < len(c.s) && (c.s[c.pos] == ' ' || c.s[c.pos] == '\t') {
		c.pos++
	}
	return c.pos > start
}

func (c *cursor) consume(prefix string) bool {
	if strings.HasPrefix(c.rest(), prefix) {
		c.pos += len(prefix)
		return true
	}
	return false
}

// consumeWord skips up to the next blank.
func (c *cursor) consumeWord() {
	for c.pos < len(c.s) && c.s[c.pos] != ' ' && c.s[c.pos] != '\t' {
		c.pos++
	}
}

// consumeWordIf consumes word when it is followed by a blank or the end.
func (c *cursor) consumeWordIf(word string) bool {
	r := c.rest()
	if !strings.HasPrefix(r, word) {
		return false
	}
	if len(r) > len(word) && r[len(word)] != ' ' && r[len(word)] != '\t' {
		return false
	}
	c.pos += len(word)
	return true
}

// digits consumes a run of decimal digits and reports whether there was one.
func (c *cursor) digits() bool {
	start := c.pos
	for c.pos < len(c.s) && c.s[c.pos] >= '0' && c.s[c.pos] <= '9' {
		c.pos++
	}
	return c.pos > start
}

// number consumes a decimal number no larger than limit.
func (c *cursor) number(limit int) (int, bool) {
	start := c.pos
	if !c.digits() || c.pos-start > 6 {
		return 0, false
	}
	n, err := strconv.Atoi(c.s[start:c.pos])
	if err != nil || n > limit {
		return 0, false
	}
	return n, true
}

// bracketNumber consumes "[<n>]".
func (c *cursor) bracketNumber(limit int) (int, bool) {
	if !c.consume("[") {
		return 0, false
	}
	n, ok := c.number(limit)
	if !ok || !c.consume("]") {
		return 0, false
	}
	return n, true
}

// extPort skips the "[ext <n>]" external port number of -g output.
func (c *cursor) extPort() {
	save := c.pos
	if c.consume("[ext ") && c.digits() && c.consume("]") {
		return
	}
	c.pos = save
}

// parenHex consumes "(<hex>)"; on failure it consumes nothing.
func (c *cursor) parenHex() (string, bool) {
	save := c.pos
	if !c.consume("(") {
		return "", false
	}
	start := c.pos
	for c.pos < len(c.s) && isHexDigit(c.s[c.pos]) {
		c.pos++
	}
	hex := c.s[start:c.pos]
	if hex == "" || len(hex) > 16 || !c.consume(")") {
		c.pos = save
		return "", false
	}
	return hex, true
}

// nodeRef consumes a quoted node name such as "S-0002c90300a1b2c3" and
// returns its type and normalised GUID.
func (c *cursor) nodeRef() (NodeType, string, error) {
	r := c.rest()
	if len(r) < 4 || r[0] != '"' || r[2] != '-' {
		return 0, "", fmt.Errorf("expected a quoted node name such as \"S-<guid>\", found %s", quoteSnippet(r))
	}
	var typ NodeType
	switch r[1] {
	case 'S':
		typ = NodeSwitch
	case 'H':
		typ = NodeCA
	case 'R':
		typ = NodeRouter
	default:
		return 0, "", fmt.Errorf("node name %s: type must be S, H or R", quoteSnippet(r))
	}
	end := strings.IndexByte(r[3:], '"')
	if end < 0 {
		return 0, "", fmt.Errorf("node name %s has no closing quote", quoteSnippet(r))
	}
	guid, ok := normalizeGUID(r[3 : 3+end])
	if !ok {
		return 0, "", fmt.Errorf("node name %s: GUID must be 1 to 16 hex digits", quoteSnippet(r[:3+end+1]))
	}
	c.pos += 3 + end + 1
	return typ, guid, nil
}

// quotedToLastQuote consumes a quoted node description. The description runs
// to the last quote on the line: ibnetdiscover does not escape quotes inside
// descriptions, and nothing after a description is quoted.
func (c *cursor) quotedToLastQuote() (string, bool) {
	r := c.rest()
	if len(r) < 2 || r[0] != '"' {
		return "", false
	}
	end := strings.LastIndexByte(r, '"')
	if end == 0 {
		return "", false
	}
	c.pos += end + 1
	return r[1:end], true
}

func normalizeGUID(s string) (string, bool) {
	if s == "" || len(s) > 16 {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if !isHexDigit(s[i]) {
			return "", false
		}
	}
	return strings.Repeat("0", 16-len(s)) + strings.ToLower(s), true
}

func isHexDigit(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F'
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func firstField(s string) string {
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return s[:i]
	}
	return s
}

// quoteSnippet quotes the start of s for an error message.
func quoteSnippet(s string) string {
	const limit = 40
	if s == "" {
		return "end of line"
	}
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}
