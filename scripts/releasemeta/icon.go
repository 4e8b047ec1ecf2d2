package main

import (
	"bytes"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
)

// The extension's icon, drawn here rather than kept as a binary in the
// repository: a shell prompt (">_") inside a box (the sandbox), on a dark
// rounded square, 512×512, anti-aliased. Shapes are signed distance
// functions, each pixel covered by the fraction of a pixel inside them;
// the same bytes every build.
//
//	releasemeta icon -out icon.png

const iconSize = 512

// iconShape is one filled shape: its distance at (x, y) (negative inside)
// and its colour.
type iconShape struct {
	dist func(x, y float64) float64
	c    color.NRGBA
}

// roundedBox is the distance to a box of half sizes (hw, hh) centred at
// (cx, cy), corners of radius r.
func roundedBox(cx, cy, hw, hh, r float64) func(x, y float64) float64 {
	return func(x, y float64) float64 {
		qx, qy := math.Abs(x-cx)-hw+r, math.Abs(y-cy)-hh+r
		return math.Hypot(math.Max(qx, 0), math.Max(qy, 0)) + math.Min(math.Max(qx, qy), 0) - r
	}
}

// capsule is the distance to the segment (ax, ay)–(bx, by) thickened to
// radius r.
func capsule(ax, ay, bx, by, r float64) func(x, y float64) float64 {
	return func(x, y float64) float64 {
		px, py, dx, dy := x-ax, y-ay, bx-ax, by-ay
		h := math.Max(0, math.Min(1, (px*dx+py*dy)/(dx*dx+dy*dy)))
		return math.Hypot(px-dx*h, py-dy*h) - r
	}
}

// ring is the outline, w wide, of the shape d.
func ring(d func(x, y float64) float64, w float64) func(x, y float64) float64 {
	return func(x, y float64) float64 { return math.Abs(d(x, y)) - w/2 }
}

func drawIcon() ([]byte, error) {
	const c = iconSize / 2
	green := color.NRGBA{0x4a, 0xde, 0x80, 0xff}
	shapes := []iconShape{
		{roundedBox(c, c, c, c, 104), color.NRGBA{0x0f, 0x17, 0x2a, 0xff}},                 // slate background
		{ring(roundedBox(c, c, 176, 176, 44), 18), color.NRGBA{0x38, 0xbd, 0xf8, 0xff}},    // the box
		{capsule(168, 186, 252, 256, 19), green}, {capsule(252, 256, 168, 326, 19), green}, // ">"
		{capsule(282, 326, 352, 326, 19), green}, // "_"
	}
	img := image.NewNRGBA(image.Rect(0, 0, iconSize, iconSize))
	for y := range iconSize {
		for x := range iconSize {
			px, py := float64(x)+0.5, float64(y)+0.5
			var r, g, b, a float64 // premultiplied, 0..1
			for _, s := range shapes {
				cov := math.Max(0, math.Min(1, 0.5-s.dist(px, py)))
				if cov == 0 {
					continue
				}
				sa := cov * float64(s.c.A) / 255
				r = float64(s.c.R)/255*sa + r*(1-sa)
				g = float64(s.c.G)/255*sa + g*(1-sa)
				b = float64(s.c.B)/255*sa + b*(1-sa)
				a = sa + a*(1-sa)
			}
			if a > 0 {
				img.SetNRGBA(x, y, color.NRGBA{uint8(math.Round(r / a * 255)), uint8(math.Round(g / a * 255)), uint8(math.Round(b / a * 255)), uint8(math.Round(a * 255))})
			}
		}
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func iconCmd(args []string) error {
	fs := flag.NewFlagSet("icon", flag.ContinueOnError)
	out := fs.String("out", "", "the PNG to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("icon: -out is required")
	}
	b, err := drawIcon()
	if err != nil {
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}
