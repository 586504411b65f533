package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// A ratio of two rates measured minutes apart moves with the machine: an
// fsync's cost drifts with the disk, a CPU's share with its neighbours. So
// each ratio's two sides are measured interleaved, in short slices: A B A B
// ..., both sides' owners open throughout, each pair back to back (a
// scenario with a third side, etcd's Mutex beside disco and the floor,
// measures A B C A B C ...: a pair is then one slice of each). Every
// pair gives one ratio, measured under (nearly) the same conditions; the
// figure is the median of the per-pair ratios with their interquartile
// range, and a goal is judged on that range (judgeFigure).

// pairCfg says how a scenario interleaves its sides.
type pairCfg struct {
	pairs  int           // pairs of slices (main requires at least minPairs)
	slice  time.Duration // measured time of each side's slice
	warmup time.Duration // unmeasured time at the start of each slice
}

// Defaults of -pairs, -slice and -slice-warmup.
const (
	minPairs           = 7
	defaultSlice       = 500 * time.Millisecond
	defaultSliceWarmup = 100 * time.Millisecond
)

// defaultPairCfg is what a runner without a pairCfg uses.
var defaultPairCfg = pairCfg{pairs: minPairs, slice: defaultSlice, warmup: defaultSliceWarmup}

// slicer is one side of a ratio, open across the slices it is measured in.
type slicer interface {
	slice(ctx context.Context, cfg runCfg) (*side, error)
	close()
}

// interleaved is what interleave measured: sides[k][i] is side k's slice
// of pair i (a pair is one slice of every side, back to back: a third side
// makes it A B C), and pooled[k] side k's slices pooled into one side.
type interleaved struct {
	sides  [][]*side
	pooled []*side
}

// interleave opens the sides (at least two), runs one pair of slices
// unmeasured (the contenders' queue fills, connections warm up), then
// measures pc.pairs pairs of slices, each side in the order given, and
// closes them.
func interleave(ctx context.Context, pc pairCfg, opens ...func() (slicer, error)) (*interleaved, error) {
	var sds []slicer
	defer func() {
		for _, sd := range sds {
			sd.close()
		}
	}()
	for _, open := range opens {
		sd, err := open()
		if err != nil {
			return nil, err
		}
		sds = append(sds, sd)
	}
	cfg := runCfg{warmup: pc.warmup, duration: pc.slice}
	for _, sd := range sds {
		if _, err := sd.slice(ctx, cfg); err != nil {
			return nil, err
		}
	}
	out := interleaved{sides: make([][]*side, len(sds))}
	for range pc.pairs {
		for k, sd := range sds {
			s, err := sd.slice(ctx, cfg)
			if err != nil {
				return nil, err
			}
			out.sides[k] = append(out.sides[k], s)
		}
	}
	for _, ss := range out.sides {
		out.pooled = append(out.pooled, poolSides(ss))
	}
	return &out, nil
}

// perPair returns f of sides a and b in each pair, leaving out the pairs
// for which f has no value (ok false: a side measured nothing in that
// slice).
func (iv *interleaved) perPair(a, b int, f func(a, b *side) (v float64, ok bool)) []float64 {
	var vs []float64
	for i := range iv.sides[a] {
		if v, ok := f(iv.sides[a][i], iv.sides[b][i]); ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// rateRatio is A's rate over B's, when B measured some.
func rateRatio(a, b *side) (float64, bool) { return a.PerSec / b.PerSec, b.PerSec > 0 }

// poolSides is one side measured in the given slices: their counts and
// windows added, their samples pooled, their load per acquisition weighted
// by each slice's acquisitions.
func poolSides(ss []*side) *side {
	p := &side{}
	var loads []*load
	var splits []*handoffSplit
	for _, s := range ss {
		p.Lib = s.Lib
		if s.Footprint != nil {
			p.Footprint = s.Footprint // the owners' own, the same in every slice
		}
		p.addCounts(s)
		p.handoffs = append(p.handoffs, s.handoffs...)
		p.waits = append(p.waits, s.waits...)
		p.cycles = append(p.cycles, s.cycles...)
		p.fromReturn = append(p.fromReturn, s.fromReturn...)
		if s.Load != nil {
			loads = append(loads, s.Load)
		}
		if s.Split != nil {
			splits = append(splits, s.Split)
		}
	}
	p.rate()
	p.Handoff, p.HandoffR = summarize(p.handoffs), summarize(p.fromReturn)
	p.Wait, p.Cycle = summarize(p.waits), summarize(p.cycles)
	if len(loads) > 0 && len(loads) == len(ss) {
		p.Load = poolLoads(loads)
	}
	if len(splits) > 0 {
		var h, u, r []time.Duration
		for _, sp := range splits {
			h, u, r = append(h, sp.handoffs...), append(u, sp.unlocks...), append(r, sp.rests...)
		}
		p.Split = newHandoffSplit(h, u, r)
	}
	return p
}

// poolLoads is the load per acquisition over all of ls's windows together.
func poolLoads(ls []*load) *load {
	p := &load{Store: ls[0].Store, ByMethod: map[string]float64{}}
	for _, l := range ls {
		p.Acquisitions += l.Acquisitions
	}
	if p.Acquisitions == 0 {
		return p
	}
	w := func(l *load) float64 { return float64(l.Acquisitions) / float64(p.Acquisitions) }
	add := func(dst **float64, v *float64, wt float64) {
		if v == nil {
			return
		}
		if *dst == nil {
			*dst = new(float64)
		}
		**dst += *v * wt
	}
	for _, l := range ls {
		wt := w(l)
		p.Requests += l.Requests * wt
		p.WatchEvents += l.WatchEvents * wt
		for m, v := range l.ByMethod {
			p.ByMethod[m] += v * wt
		}
		add(&p.Wakeups, l.Wakeups, wt)
		add(&p.Rechecks, l.Rechecks, wt)
		add(&p.WakeMessages, l.WakeMessages, wt)
	}
	return p
}

// figure is a quantity measured once per pair: the median of the per-pair
// values and their interquartile range [Q1, Q3] (linear interpolation
// between the sorted values, as R's and numpy's default quantile).
type figure struct {
	Median  float64   `json:"median"`
	Q1      float64   `json:"q1"`
	Q3      float64   `json:"q3"`
	PerPair []float64 `json:"per_pair"` // in the order measured
	// Resolution, for a count per acquisition, is how far a slice's value
	// may be off by the counting alone: the store's counters are read at
	// the slice's ends, where an acquisition in flight may count in one
	// slice and its requests or events in the next (one acquisition's
	// worth at each end).
	// judgeFigure counts a value within it of the threshold as on it.
	Resolution float64 `json:"resolution,omitempty"`
}

// figureOf summarises per-pair values; nil when there are none.
func figureOf(vs []float64) *figure {
	if len(vs) == 0 {
		return nil
	}
	sorted := slices.Sorted(slices.Values(vs))
	q := func(p float64) float64 {
		x := p * float64(len(sorted)-1)
		i := int(math.Floor(x))
		if i+1 >= len(sorted) {
			return sorted[i]
		}
		return sorted[i] + (x-float64(i))*(sorted[i+1]-sorted[i])
	}
	return &figure{Median: q(0.5), Q1: q(0.25), Q3: q(0.75), PerPair: vs}
}

// fmtFigure prints f as "1.15x [1.08..1.22]" (unit "x") or "2.40 [2.31..2.52]".
func fmtFigure(f *figure, unit string) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f%s [%.2f..%.2f]", f.Median, unit, f.Q1, f.Q3)
}

// fmtCount prints f, a count per acquisition judged within its resolution,
// with the three decimals its verdict turns on: "1.002 [1.001..1.006]".
func fmtCount(f *figure) string {
	return fmt.Sprintf("%.3f [%.3f..%.3f]", f.Median, f.Q1, f.Q3)
}

// Goal statuses besides met, MISSED and n/a.
const statusInconclusive = "inconclusive"

// judgeFigure judges f against threshold, which f must reach (atLeast) or
// not exceed: met when f's whole interquartile range is on the right side
// of threshold, MISSED when it is on the wrong side, inconclusive when
// threshold lies within it (each within f's resolution); n/a when f is
// nil (nothing measured).
func judgeFigure(name string, f *figure, atLeast bool, threshold float64, unit, detail string) goal {
	if f == nil {
		return goal{Name: name, Status: "n/a", Detail: "no pair measured both sides" + detail}
	}
	shown := fmtFigure(f, unit)
	if f.Resolution > 0 {
		shown = fmtCount(f)
	}
	d := shown + " " + describe(f) + detail
	lo, hi := f.Q1, f.Q3
	if !atLeast {
		lo, hi, threshold = -hi, -lo, -threshold
	}
	switch {
	case lo+f.Resolution >= threshold:
		return goal{Name: name, Status: "met", Detail: d}
	case hi+f.Resolution < threshold:
		return goal{Name: name, Status: "MISSED", Detail: d}
	default:
		return goal{Name: name, Status: statusInconclusive, Detail: d}
	}
}

// describe says what fmtFigure's (or fmtCount's) numbers are.
func describe(f *figure) string {
	if f.Resolution > 0 {
		return fmt.Sprintf("(median [IQR] of %d pairs; counted to within %.3f)", len(f.PerPair), f.Resolution)
	}
	return fmt.Sprintf("(median [IQR] of %d pairs)", len(f.PerPair))
}
