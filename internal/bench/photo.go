package bench

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"

	"golang.org/x/image/draw"
)

// photoJPEG makes a w x h image that compresses like a photograph (smooth
// light over the frame, textures at a few scales, shapes with edges and
// sensor noise) and encodes it as a baseline JPEG at the quality whose
// size comes closest to target bytes. The same seed gives the same image.
// A gradient alone would compress to a few kilobytes and random pixels to
// several megabytes; neither decodes like the photos users attach.
func photoJPEG(w, h int, target int64, seed uint64) ([]byte, int, error) {
	img := photoPixels(w, h, seed)
	lo, hi := 30, 97
	var best []byte
	bestQ := 0
	for lo <= hi {
		q := (lo + hi) / 2
		var b bytes.Buffer
		if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: q}); err != nil {
			return nil, 0, fmt.Errorf("encode a %dx%d JPEG at quality %d: %w", w, h, q, err)
		}
		if best == nil || absInt64(int64(b.Len())-target) < absInt64(int64(len(best))-target) {
			best, bestQ = b.Bytes(), q
		}
		if int64(b.Len()) < target {
			lo = q + 1
		} else {
			hi = q - 1
		}
	}
	return best, bestQ, nil
}

func absInt64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// photoPixels draws the image of photoJPEG.
func photoPixels(w, h int, seed uint64) *image.RGBA {
	rng := rand.New(rand.NewPCG(seed, 0x70686f746f))
	// Light: per channel, a few long waves across the frame. sin(ax+by)
	// splits into row and column tables, so no sine is taken per pixel.
	type wave struct{ sx, cx, sy, cy []float64 }
	var waves [3][4]wave
	for c := range waves {
		for k := range waves[c] {
			period := 400 + rng.Float64()*2400
			angle := rng.Float64() * 2 * math.Pi
			a, b := 2*math.Pi/period*math.Cos(angle), 2*math.Pi/period*math.Sin(angle)
			wv := wave{make([]float64, w), make([]float64, w), make([]float64, h), make([]float64, h)}
			phase := rng.Float64() * 2 * math.Pi
			for x := range w {
				wv.sx[x], wv.cx[x] = math.Sincos(a*float64(x) + phase)
			}
			for y := range h {
				wv.sy[y], wv.cy[y] = math.Sincos(b * float64(y))
			}
			waves[c][k] = wv
		}
	}
	// Texture: value noise on coarse grids (foliage, fabric, gravel).
	grids := []struct {
		cell int
		amp  float64
		v    []float64
		gw   int
	}{{64, 40, nil, 0}, {12, 24, nil, 0}, {3, 30, nil, 0}}
	for i := range grids {
		g := &grids[i]
		g.gw = w/g.cell + 2
		g.v = make([]float64, g.gw*(h/g.cell+2))
		for j := range g.v {
			g.v[j] = rng.Float64()*2 - 1
		}
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			var tex float64
			for i := range grids {
				g := &grids[i]
				gx, gy := x/g.cell, y/g.cell
				fx, fy := float64(x%g.cell)/float64(g.cell), float64(y%g.cell)/float64(g.cell)
				v00, v10 := g.v[gy*g.gw+gx], g.v[gy*g.gw+gx+1]
				v01, v11 := g.v[(gy+1)*g.gw+gx], g.v[(gy+1)*g.gw+gx+1]
				tex += g.amp * ((v00*(1-fx)+v10*fx)*(1-fy) + (v01*(1-fx)+v11*fx)*fy)
			}
			// Grain: mostly in the light, a little in the colour.
			tex += rng.NormFloat64() * 14
			o := img.PixOffset(x, y)
			for c := range 3 {
				v := 128.0
				for k := range waves[c] {
					wv := &waves[c][k]
					v += 22 * (wv.sx[x]*wv.cy[y] + wv.cx[x]*wv.sy[y])
				}
				v += tex + rng.NormFloat64()*3
				img.Pix[o+c] = uint8(min(255, max(0, v)))
			}
			img.Pix[o+3] = 255
		}
	}
	// Objects: flat-ish shapes with hard edges over the scene.
	for range 40 {
		r := image.Rect(0, 0, 20+rng.IntN(w/4), 20+rng.IntN(h/4)).Add(image.Pt(rng.IntN(w), rng.IntN(h)))
		col := image.NewUniform(color.RGBA{uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), 255})
		mask := image.NewUniform(color.Alpha{uint8(96 + rng.IntN(160))})
		draw.DrawMask(img, r, col, image.Point{}, mask, image.Point{}, draw.Over)
	}
	return img
}
