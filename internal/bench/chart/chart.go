package chart

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strconv"
)

// Series is one line of a chart: the points (X[i], Y[i]). A NaN breaks
// the line; on a log axis a value <= 0 is left out (X) or drawn at the
// bottom (Y).
type Series struct {
	Name  string
	X, Y  []float64
	Color color.RGBA
	Dash  bool
}

// Tick is a labelled tick of the X axis.
type Tick struct {
	V     float64
	Label string
}

// Mark is a labelled vertical line at X.
type Mark struct {
	X     float64
	Label string
	Color color.RGBA
}

// Line is a chart of lines over two axes, each linear or logarithmic.
// The zero values of the fields are defaults: ticks computed from the
// data, Y and X bounds from the data, 1040x560 pixels (plus the legend).
type Line struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	XTicks                []Tick  // custom ticks; default computed
	YMin                  float64 // lower bound of Y (log: above 0); 0 = from data
	XMin, XMax            float64 // bounds of X when XMax > XMin; else from data
	Series                []Series
	Marks                 []Mark
	W, H                  int
}

// Palette is a sequence of line colours that stay apart for the colour
// blind (Okabe-Ito).
var Palette = []color.RGBA{
	{0x00, 0x72, 0xb2, 0xff}, // blue
	{0xd5, 0x5e, 0x00, 0xff}, // vermillion
	{0x00, 0x9e, 0x73, 0xff}, // green
	{0xcc, 0x79, 0xa7, 0xff}, // purple
	{0xe6, 0x9f, 0x00, 0xff}, // orange
	{0x56, 0xb4, 0xe9, 0xff}, // sky
}

var (
	colBlack = color.RGBA{0x20, 0x20, 0x20, 0xff}
	colGrid  = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	colAxis  = color.RGBA{0x60, 0x60, 0x60, 0xff}
)

const (
	textScale = 2
	glyphW    = 6 * textScale // advance, with one column of spacing
	glyphH    = 7 * textScale
)

type canvas struct{ img *image.RGBA }

func (c canvas) set(x, y int, col color.RGBA) {
	if image.Pt(x, y).In(c.img.Rect) {
		c.img.SetRGBA(x, y, col)
	}
}

func (c canvas) rect(x0, y0, x1, y1 int, col color.RGBA) {
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			c.set(x, y, col)
		}
	}
}

// line draws a line of width w; dash draws 8 pixels of every 14.
func (c canvas) line(x0, y0, x1, y1 float64, w int, col color.RGBA, dash bool) {
	n := int(math.Max(math.Abs(x1-x0), math.Abs(y1-y0))) + 1
	for i := 0; i <= n; i++ {
		if dash && i%14 >= 8 {
			continue
		}
		t := float64(i) / float64(n)
		x := int(math.Round(x0 + (x1-x0)*t))
		y := int(math.Round(y0 + (y1-y0)*t))
		c.rect(x-w/2, y-w/2, x-w/2+w, y-w/2+w, col)
	}
}

// text draws s with its top-left corner at (x, y); vertical turns it a
// quarter counter-clockwise (reading upwards from (x, y) as bottom-left).
func (c canvas) text(x, y int, s string, col color.RGBA, vertical bool) {
	for i, r := range []rune(s) {
		for gy := 0; gy < 7; gy++ {
			for gx := 0; gx < 5; gx++ {
				if !glyphInk(r, gx, gy) {
					continue
				}
				px, py := i*glyphW+gx*textScale, gy*textScale
				for sy := 0; sy < textScale; sy++ {
					for sx := 0; sx < textScale; sx++ {
						if vertical {
							c.set(x+py+sy, y-px-sx, col)
						} else {
							c.set(x+px+sx, y+py+sy, col)
						}
					}
				}
			}
		}
	}
}

func textWidth(s string) int { return len([]rune(s)) * glyphW }

// axis maps data to pixels.
type axis struct {
	lo, hi float64 // in data units (log: log10 of them)
	log    bool
	p0, p1 float64 // pixels of lo and hi
}

func (a axis) px(v float64) float64 {
	if a.log {
		v = math.Log10(math.Max(v, 1e-300))
	}
	return a.p0 + (v-a.lo)/(a.hi-a.lo)*(a.p1-a.p0)
}

// ticks are custom, else one per power of ten (log), else round ones.
func (a axis) ticks(custom []Tick) []Tick {
	if len(custom) > 0 {
		return custom
	}
	var out []Tick
	if a.log {
		for e := a.lo; e <= a.hi; e++ {
			out = append(out, Tick{math.Pow(10, e), fmtTick(math.Pow(10, e))})
		}
		return out
	}
	for _, v := range niceTicks(a.lo, a.hi, 6) {
		out = append(out, Tick{v, fmtTick(v)})
	}
	return out
}

// newAxis is the axis over [lo, hi] drawn from pixel p0 to p1: a log one
// out to whole powers of ten, a linear one out to round ticks unless
// fixed (X with given bounds; Y, drawn upwards, never is).
func newAxis(lo, hi float64, log, fixed bool, p0, p1 float64) axis {
	if log {
		lo, hi = math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if hi == lo {
			hi++
		}
	} else if p1 < p0 || !fixed {
		t := niceTicks(lo, hi, 6)
		step := 1.0
		if len(t) > 1 {
			step = t[1] - t[0]
		}
		lo, hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	}
	return axis{lo: lo, hi: hi, log: log, p0: p0, p1: p1}
}

// niceTicks returns round ticks covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	span := hi - lo
	if span <= 0 {
		return []float64{lo}
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

func fmtTick(v float64) string {
	av := math.Abs(v)
	switch {
	case av >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case av >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	case av == 0:
		return "0"
	case av < 0.01:
		return strconv.FormatFloat(v, 'g', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// frame is where a chart's parts go: the plot box in pixels (y0 is its
// bottom), the left margin and the height above the legend.
type frame struct {
	x0, x1, y0, y1 float64
	left, plotH    int
}

// Render draws the chart; the legend goes under it, two entries a line.
func (ch Line) Render() *image.RGBA {
	if ch.W == 0 {
		ch.W, ch.H = 1040, 560
	}
	legendRows := (len(ch.Series) + 1) / 2
	plotH := ch.H
	ch.H += legendRows*(glyphH+10) + 8
	img := image.NewRGBA(image.Rect(0, 0, ch.W, ch.H))
	c := canvas{img}
	c.rect(0, 0, ch.W, ch.H, color.RGBA{0xff, 0xff, 0xff, 0xff})
	left, right, top, bottom := 110, 48, 56, 72
	f := frame{x0: float64(left), x1: float64(ch.W - right), y0: float64(plotH - bottom), y1: float64(top), left: left, plotH: plotH}
	xlo, xhi, ylo, yhi := ch.bounds()
	ax := newAxis(xlo, xhi, ch.LogX, ch.XMax > ch.XMin, f.x0, f.x1)
	ay := newAxis(ylo, yhi, ch.LogY, ch.XMax > ch.XMin, f.y0, f.y1)
	ch.drawGrid(c, f, ax, ay)
	ch.drawLines(c, f, ax, ay)
	ch.drawLabels(c, f)
	return img
}

// bounds are the ranges of the data, widened to the custom ticks and
// overridden by the given bounds.
func (ch Line) bounds() (xlo, xhi, ylo, yhi float64) {
	xlo, xhi, ylo, yhi = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range ch.Series {
		for i := range s.X {
			x, y := s.X[i], s.Y[i]
			if (ch.LogX && x <= 0) || math.IsNaN(x) || math.IsInf(x, 0) {
				continue
			}
			xlo, xhi = math.Min(xlo, x), math.Max(xhi, x)
			if (ch.LogY && y <= 0) || math.IsNaN(y) || math.IsInf(y, 0) {
				continue
			}
			ylo, yhi = math.Min(ylo, y), math.Max(yhi, y)
		}
	}
	for _, t := range ch.XTicks {
		xlo, xhi = math.Min(xlo, t.V), math.Max(xhi, t.V)
	}
	if math.IsInf(xlo, 0) {
		xlo, xhi = 0, 1
	}
	if math.IsInf(ylo, 0) {
		ylo, yhi = 1, 10
	}
	if ch.YMin != 0 || (!ch.LogY && ylo > 0) {
		ylo = ch.YMin
	}
	if ch.XMax > ch.XMin {
		xlo, xhi = ch.XMin, ch.XMax
	}
	if xhi == xlo {
		xhi = xlo + 1
	}
	if yhi <= ylo {
		yhi = ylo + 1
	}
	return xlo, xhi, ylo, yhi
}

// drawGrid draws the grid lines, their tick labels and the axes.
func (ch Line) drawGrid(c canvas, f frame, ax, ay axis) {
	for _, t := range ax.ticks(ch.XTicks) {
		x := ax.px(t.V)
		c.line(x, f.y0, x, f.y1, 1, colGrid, false)
		c.text(int(x)-textWidth(t.Label)/2, int(f.y0)+10, t.Label, colBlack, false)
	}
	for _, t := range ay.ticks(nil) {
		y := ay.px(t.V)
		c.line(f.x0, y, f.x1, y, 1, colGrid, false)
		c.text(int(f.x0)-10-textWidth(t.Label), int(y)-glyphH/2, t.Label, colBlack, false)
	}
	c.line(f.x0, f.y0, f.x1, f.y0, 2, colAxis, false)
	c.line(f.x0, f.y0, f.x0, f.y1, 2, colAxis, false)
}

// drawLines draws the marks, then the series, clipped to the plot.
func (ch Line) drawLines(c canvas, f frame, ax, ay axis) {
	for _, m := range ch.Marks {
		x := ax.px(m.X)
		if x < f.x0 || x > f.x1 {
			continue
		}
		c.line(x, f.y0, x, f.y1, 2, m.Color, true)
		c.text(int(x)+6, int(f.y1)+6, m.Label, m.Color, false)
	}
	clip := func(v, a, b float64) float64 { return math.Max(math.Min(v, math.Max(a, b)), math.Min(a, b)) }
	for _, s := range ch.Series {
		var prevX, prevY float64
		have := false
		for i := range s.X {
			x, y := s.X[i], s.Y[i]
			if ch.LogY && y <= 0 {
				y = math.Pow(10, ay.lo) // zero on a log axis: the bottom
			}
			if math.IsNaN(x) || math.IsNaN(y) || (ch.LogX && x <= 0) {
				have = false
				continue
			}
			X, Y := clip(ax.px(x), f.x0, f.x1), clip(ay.px(y), f.y0, f.y1)
			if have {
				c.line(prevX, prevY, X, Y, 2, s.Color, s.Dash)
			}
			prevX, prevY, have = X, Y, true
		}
	}
}

// drawLabels draws the title, the axis labels and the legend.
func (ch Line) drawLabels(c canvas, f frame) {
	c.text((ch.W-textWidth(ch.Title))/2, 16, ch.Title, colBlack, false)
	c.text((int(f.x0+f.x1)-textWidth(ch.XLabel))/2, f.plotH-30, ch.XLabel, colBlack, false)
	c.text(14, (int(f.y0+f.y1)+textWidth(ch.YLabel))/2, ch.YLabel, colBlack, true)
	colW := (ch.W - f.left) / 2
	for i, s := range ch.Series {
		lx, y := f.left+(i%2)*colW, f.plotH+(i/2)*(glyphH+10)
		c.line(float64(lx), float64(y+glyphH/2), float64(lx+36), float64(y+glyphH/2), 3, s.Color, s.Dash)
		c.text(lx+44, y, s.Name, colBlack, false)
	}
}

// WritePNG renders the chart into the file at path.
func (ch Line) WritePNG(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, ch.Render()); err != nil {
		f.Close()
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return f.Close()
}
