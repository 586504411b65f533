package main

import (
	"image/color"
	"math"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// chart is how a scenario's result is drawn: latency CDFs, or bars.
type chart struct {
	title, xLabel, yLabel string
	cdfs                  []series
	bars                  []bar
}

type series struct {
	name    string
	samples []time.Duration
}

type bar struct {
	name  string
	value float64 // in the chart's yLabel unit
}

// maxCDFPoints bounds the points drawn per line.
const maxCDFPoints = 2000

// minPlotMs keeps a log axis away from zero.
const minPlotMs = 0.001

// save writes the chart as a PNG. A chart with nothing to draw is skipped.
func (c chart) save(path string) (bool, error) {
	p := plot.New()
	p.Title.Text = c.title
	switch {
	case len(c.cdfs) > 0:
		if !c.addCDFs(p) {
			return false, nil
		}
	case len(c.bars) > 0:
		c.addBars(p)
	default:
		return false, nil
	}
	return true, p.Save(8*vg.Inch, 5*vg.Inch, path)
}

func (c chart) addCDFs(p *plot.Plot) bool {
	p.X.Label.Text = c.xLabel
	p.Y.Label.Text = "fraction of samples ≤ x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	// Bottom right: CDF lines end up top right.
	p.Legend.Top, p.Legend.Left = false, false
	drawn := false
	for _, s := range c.cdfs {
		if len(s.samples) == 0 {
			continue
		}
		line, err := plotter.NewLine(cdfPoints(s.samples))
		if err != nil {
			continue
		}
		line.Color = colorFor(s.name)
		line.Width = vg.Points(1.5)
		if strings.Contains(s.name, "wait") {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(s.name, line)
		drawn = true
	}
	return drawn
}

// cdfPoints returns (latency ms, cumulative fraction) for sorted copies of
// samples, thinned to at most maxCDFPoints.
func cdfPoints(samples []time.Duration) plotter.XYs {
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	n := len(sorted)
	step := max(1, n/maxCDFPoints)
	pts := make(plotter.XYs, 0, n/step+2)
	for i := 0; i < n; i += step {
		pts = append(pts, plotter.XY{X: math.Max(ms(sorted[i]), minPlotMs), Y: float64(i+1) / float64(n)})
	}
	if last := n - 1; last%step != 0 {
		pts = append(pts, plotter.XY{X: math.Max(ms(sorted[last]), minPlotMs), Y: 1})
	}
	return pts
}

func (c chart) addBars(p *plot.Plot) {
	p.Y.Label.Text = c.yLabel
	vals := make(plotter.Values, len(c.bars))
	names := make([]string, len(c.bars))
	for i, b := range c.bars {
		vals[i], names[i] = b.value, b.name
	}
	bc, err := plotter.NewBarChart(vals, vg.Points(40))
	if err != nil {
		return
	}
	bc.Color = colorFor("disco")
	p.Add(bc)
	p.NominalX(names...)
}

func colorFor(name string) color.Color {
	switch {
	case strings.HasPrefix(name, "disco"):
		return color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	case strings.HasPrefix(name, "etcd"):
		return color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	default:
		return color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
	}
}
