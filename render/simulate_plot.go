package render

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/lanes-dev/lanes/sim/model"
)

// PlotFormats are the --plot file types, by extension.
var PlotFormats = []string{"png", "svg"}

var (
	seriesColor = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	targetColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	pickColor   = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
)

// SweepPlot draws the sweep for reports: capacity (top) and p99 latency
// (bottom) against the partition count, with the targets as red lines and
// the recommended count in green; a sweep of keys in flight has one line
// per K. format is png or svg.
func SweepPlot(w io.Writer, format string, sw model.Sweep) error {
	capacity, err := sweepPanel(sw, "capacity (messages/s)", func(p model.SweepPoint) float64 { return p.Capacity }, (1+sw.Headroom)*sw.TargetRate)
	if err != nil {
		return err
	}
	capacity.Title.Text = fmt.Sprintf("lanes sweep %s partitions", sw.Counts())
	if sw.Keyed() {
		capacity.Title.Text += " x keys in flight"
	}
	p99, err := sweepPanel(sw, "p99 latency (ms)", func(p model.SweepPoint) float64 { return p.LatencyP99ms }, sw.TargetP99)
	if err != nil {
		return err
	}
	p99.X.Label.Text = "partitions"

	width, height := 8*vg.Inch, 7*vg.Inch
	var c vg.CanvasWriterTo
	switch format {
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.New(width, height)}
	case "svg":
		c = vgsvg.New(width, height)
	default:
		return fmt.Errorf("plot format %q: choose png or svg", format)
	}
	plots := [][]*plot.Plot{{capacity}, {p99}}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	canvases := plot.Align(plots, tiles, draw.New(c))
	capacity.Draw(canvases[0][0])
	p99.Draw(canvases[1][0])
	_, err = c.WriteTo(w)
	return err
}

// sweepPanel plots one figure per partition count, a horizontal target
// line when target > 0, and a marker on the recommended count.
func sweepPanel(sw model.Sweep, label string, value func(model.SweepPoint) float64, target float64) (*plot.Plot, error) {
	p := plot.New()
	p.Y.Label.Text = label
	p.X.Tick.Marker = partitionTicks{}
	p.Add(plotter.NewGrid())
	top := target
	for _, pt := range sw.Points {
		top = max(top, value(pt))
	}
	// Start at zero and leave room above the highest point for the legend.
	p.Y.Min, p.Y.Max = 0, top*1.2
	for i, k := range sweepKeys(sw) {
		var pts plotter.XYs
		for _, pt := range sw.Points {
			if pt.KeysInFlight == k || k == 0 {
				pts = append(pts, plotter.XY{X: float64(pt.Partitions), Y: value(pt)})
			}
		}
		line, dots, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		c := seriesColor
		if sw.Keyed() {
			c = keyColors[i%len(keyColors)]
			p.Legend.Add(fmt.Sprintf("keys in flight %d", k), line)
		}
		line.Color, dots.Color = c, c
		p.Add(line, dots)
	}
	if target > 0 {
		t, err := plotter.NewLine(plotter.XYs{{X: float64(sw.From), Y: target}, {X: float64(sw.To), Y: target}})
		if err != nil {
			return nil, err
		}
		t.Color, t.Dashes = targetColor, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(t)
		p.Legend.Add("target", t)
	}
	for _, pt := range sw.Points {
		if pt.Partitions != sw.Recommended || sw.Keyed() && pt.KeysInFlight != sw.RecommendedKeysInFlight {
			continue
		}
		pick, err := plotter.NewScatter(plotter.XYs{{X: float64(pt.Partitions), Y: value(pt)}})
		if err != nil {
			return nil, err
		}
		pick.Color, pick.Radius, pick.Shape = pickColor, vg.Points(5), draw.CircleGlyph{}
		p.Add(pick)
		label := fmt.Sprintf("recommended: %d", pt.Partitions)
		if sw.Keyed() {
			label += fmt.Sprintf(" x %d keys in flight", pt.KeysInFlight)
		}
		p.Legend.Add(label, pick)
	}
	p.Legend.Top = true
	return p, nil
}

// keyColors tell the keys in flight apart.
var keyColors = []color.RGBA{seriesColor,
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff}}

// sweepKeys are the series to draw: one per keys in flight, or one (0)
// for a sweep of partition counts alone.
func sweepKeys(sw model.Sweep) []int {
	if !sw.Keyed() {
		return []int{0}
	}
	return sw.KeysInFlight
}

// partitionTicks labels whole partition counts, about ten of them.
type partitionTicks struct{}

func (partitionTicks) Ticks(lo, hi float64) []plot.Tick {
	from, to := int(math.Ceil(lo)), int(math.Floor(hi))
	step := max(1, (to-from+1)/10)
	for _, nice := range []int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000} {
		if nice >= step {
			step = nice
			break
		}
	}
	var ticks []plot.Tick
	for v := from; v <= to; v++ {
		labelled := v%step == 0 || v == from
		switch {
		case labelled:
			ticks = append(ticks, plot.Tick{Value: float64(v), Label: strconv.Itoa(v)})
		case to-from <= 100:
			ticks = append(ticks, plot.Tick{Value: float64(v)}) // a minor tick per count
		}
	}
	return ticks
}
