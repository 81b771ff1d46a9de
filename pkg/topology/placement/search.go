package placement

import (
	"math"
	"slices"
	"strings"

	"github.com/lockstep-dev/lockstep/pkg/topology"
)

// choose returns the domain to place the whole gang in: at the narrowest
// level up to req.stop where any domain has room for every member, the best
// fit among those domains. With Near nodes only the domains holding them
// count, so they are the ancestors of those nodes' lowest common domain.
func (p *planner) choose() (int32, bool) {
	m := p.req.members
	best := int32(-1)
	for i := range p.doms {
		d := &p.doms[i]
		if d.room < m || d.d.Level > p.req.stop || !p.holdsNear(int32(i)) {
			continue
		}
		switch {
		case best < 0, d.d.Level < p.doms[best].d.Level:
			best = int32(i)
		case d.d.Level == p.doms[best].d.Level && p.fitsBetter(int32(i), best, m, true):
			best = int32(i)
		}
	}
	return best, best >= 0
}

// fitsBetter reports whether placing r members in domain a beats placing
// them in b, both able to take them: fewer free GPUs left after (best fit,
// which keeps emptier domains whole for bigger gangs), then more modelled
// bandwidth, then fewer member slots left, then the lower ID. whole says the
// r members are the entire gang, so on a host they form a one-node ring.
func (p *planner) fitsBetter(a, b int32, r int, whole bool) bool {
	da, db := &p.doms[a], &p.doms[b]
	if la, lb := da.free-r*p.req.gpus, db.free-r*p.req.gpus; la != lb {
		return la < lb
	}
	if ba, bb := p.bandwidth(a, r, whole), p.bandwidth(b, r, whole); ba != bb {
		return ba > bb
	}
	if da.room != db.room {
		return da.room < db.room
	}
	return da.d.ID < db.d.ID
}

// bandwidth is the modelled per-GPU ring bandwidth of r members in domain i:
// for a whole gang on one host, the weakest link of the best set of all its
// GPUs; otherwise the domain's proxy (domain.bandwidth).
func (p *planner) bandwidth(i int32, r int, whole bool) float64 {
	d := &p.doms[i]
	if !whole || d.node < 0 {
		return d.bandwidth()
	}
	node, n := p.s.Nodes[d.node], r*p.req.gpus
	if node.Selector == nil || n == 0 {
		return 0
	}
	if n == 1 {
		return math.Inf(1)
	}
	if node.DRA == nil {
		_, q, _ := node.Selector.Best(d.set, n)
		return q.BottleneckGBps
	}
	// The allocator gives each member its own set: the gang's GPUs are
	// their union.
	var all topology.GPUSet
	for free := d.set; r > 0; r-- {
		set, _, _ := pickGPUs(node, free, p.req.gpus)
		all |= set
		free &^= set
	}
	return node.Selector.Quality(all).BottleneckGBps
}

// place puts r members into domain i, which has room for them, filling as
// few children as possible: the roomiest children whole while none can take
// what is left, then the best fit among those that can. Applied down the
// tree this fills one leaf of a spine before spilling into a second, and a
// leaf's fullest-fitting nodes before emptier ones.
func (p *planner) place(i int32, r int) {
	d := &p.doms[i]
	if d.node >= 0 {
		p.take(i, r)
		return
	}
	base := len(p.scratch)
	for _, c := range p.kids[d.kidLo:d.kidHi] {
		if p.doms[c].room > 0 {
			p.scratch = append(p.scratch, c)
		}
	}
	kids := p.scratch[base:]
	k := p.req.gpus
	slices.SortFunc(kids, func(a, b int32) int {
		da, db := &p.doms[a], &p.doms[b]
		if da.room != db.room {
			return db.room - da.room
		}
		if la, lb := da.free-da.room*k, db.free-db.room*k; la != lb {
			return la - lb
		}
		if ba, bb := da.bandwidth(), db.bandwidth(); ba != bb {
			if ba > bb {
				return -1
			}
			return 1
		}
		return strings.Compare(da.d.ID, db.d.ID)
	})
	for j := 0; r > 0; j++ {
		c := kids[j]
		room := p.doms[c].room
		if room < r {
			p.place(c, room)
			r -= room
			continue
		}
		// kids is sorted by room, so those that can take r come first.
		pick := c
		for _, o := range kids[j+1:] {
			if p.doms[o].room < r {
				break
			}
			if p.fitsBetter(o, pick, r, false) {
				pick = o
			}
		}
		p.place(pick, r)
		r = 0
	}
	p.scratch = p.scratch[:base]
}

// take assigns r members to host i, each the best GPU set of what the
// members before it left free.
func (p *planner) take(i int32, r int) {
	d := &p.doms[i]
	node := p.s.Nodes[d.node]
	free := d.set
	for range r {
		var set topology.GPUSet
		if p.req.gpus > 0 {
			set, _, _ = pickGPUs(node, free, p.req.gpus)
			free &^= set
		}
		p.out = append(p.out, Assignment{Node: node.Name, GPUs: set})
	}
	p.used = append(p.used, usedNode{node: d.node, host: i, members: r})
}
