package chart

import (
	"image/color"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChartDraws(t *testing.T) {
	ch := Line{Title: "t", XLabel: "x", YLabel: "y", LogY: true, YMin: 1,
		Series: []Series{{Name: "a", X: []float64{0, 1, 2}, Y: []float64{1, 100, 0}, Color: Palette[0]}},
		Marks:  []Mark{{X: 1, Label: "m", Color: Palette[1]}}}
	img := ch.Render()
	require.Equal(t, 1040, img.Bounds().Dx())
	inked := 0
	for y := 0; y < img.Bounds().Dy(); y++ {
		for x := 0; x < img.Bounds().Dx(); x++ {
			if img.RGBAAt(x, y) == (color.RGBA{0x00, 0x72, 0xb2, 0xff}) {
				inked++
			}
		}
	}
	require.Greater(t, inked, 100, "the series is drawn")
	for r := range glyphs {
		require.Len(t, glyphs[r], 41, "glyph %q", r)
	}
}
