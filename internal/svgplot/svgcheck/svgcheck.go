// Package svgcheck checks, for tests, that an SVG chart draws the same
// everywhere: [Portable] rejects the constructs that browsers, resvg,
// librsvg and ImageMagick draw differently, and [Rasterize] draws the chart
// with an independent renderer (oksvg, pure Go, so that CI needs nothing
// installed) to see that something was drawn. oksvg draws no text, so the
// pixels it gives show the lines, axes and shading.
package svgcheck

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"io"
	"strconv"
	"strings"

	"github.com/srwiley/oksvg"
	"github.com/srwiley/rasterx"
)

// portableElements are the elements that every renderer the charts are
// checked against draws alike.
var portableElements = map[string]bool{
	"svg": true, "title": true, "g": true, "rect": true, "line": true, "path": true, "text": true,
}

// Portable returns an error naming the first construct of doc that
// renderers draw differently: a nested <svg> (placed with x= or y=, which
// some renderers ignore), any opacity (ImageMagick has drawn group opacity
// as a black band), a transform other than one translate (ImageMagick
// drops or turns rotated text the other way), text with child elements, or
// an element outside the small set the charts need.
func Portable(doc []byte) error {
	d := xml.NewDecoder(bytes.NewReader(doc))
	d.Strict = true
	var stack []string
	svgs := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("not well-formed XML: %w", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			if _, end := tok.(xml.EndElement); end {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		name := se.Name.Local
		switch {
		case !portableElements[name]:
			return fmt.Errorf("element <%s> is outside the portable set", name)
		case name == "svg":
			if svgs++; svgs > 1 {
				return errors.New("nested <svg> element")
			}
		case len(stack) > 0 && stack[len(stack)-1] == "text":
			return fmt.Errorf("<%s> inside <text>", name)
		}
		for _, a := range se.Attr {
			switch a.Name.Local {
			case "opacity", "fill-opacity", "stroke-opacity", "style", "dominant-baseline", "alignment-baseline":
				return fmt.Errorf("<%s %s=%q>: not drawn alike everywhere", name, a.Name.Local, a.Value)
			case "transform":
				if !strings.HasPrefix(a.Value, "translate(") || strings.Index(a.Value, ")") != len(a.Value)-1 {
					return fmt.Errorf("<%s transform=%q>: only one translate is drawn alike everywhere", name, a.Value)
				}
			}
		}
		stack = append(stack, name)
	}
	if svgs != 1 {
		return errors.New("no <svg> root element")
	}
	return nil
}

// Rasterize draws doc on a white canvas of its own width and height.
func Rasterize(doc []byte) (*image.RGBA, error) {
	icon, err := oksvg.ReadIconStream(bytes.NewReader(doc), oksvg.IgnoreErrorMode)
	if err != nil {
		return nil, fmt.Errorf("oksvg: %w", err)
	}
	w, h, err := size(doc)
	if err != nil {
		return nil, err
	}
	icon.SetTarget(0, 0, float64(w), float64(h))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	scanner := rasterx.NewScannerGV(w, h, img, img.Bounds())
	icon.Draw(rasterx.NewDasher(w, h, scanner), 1)
	return img, nil
}

// size reads the root element's width and height, in pixels.
func size(doc []byte) (int, int, error) {
	var root struct {
		Width  string `xml:"width,attr"`
		Height string `xml:"height,attr"`
	}
	if err := xml.Unmarshal(doc, &root); err != nil {
		return 0, 0, err
	}
	w, err1 := strconv.Atoi(root.Width)
	h, err2 := strconv.Atoi(root.Height)
	if err := errors.Join(err1, err2); err != nil || w < 1 || h < 1 || w > 10000 || h > 10000 {
		return 0, 0, fmt.Errorf("root size %q×%q is not a pixel size", root.Width, root.Height)
	}
	return w, h, nil
}

// Ink is the share of pixels of r in img that differ from white.
func Ink(img *image.RGBA, r image.Rectangle) float64 {
	r = r.Intersect(img.Bounds())
	if r.Empty() {
		return 0
	}
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if c := img.RGBAAt(x, y); c.R < 250 || c.G < 250 || c.B < 250 {
				n++
			}
		}
	}
	return float64(n) / float64(r.Dx()*r.Dy())
}

// Count returns how many pixels of img are within tol of c on every
// channel; antialiasing blends the edges of a line, so its core keeps the
// line's colour only within some tolerance.
func Count(img *image.RGBA, c color.RGBA, tol uint8) int {
	near := func(a, b uint8) bool { return max(a, b)-min(a, b) <= tol }
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			p := img.RGBAAt(x, y)
			if near(p.R, c.R) && near(p.G, c.G) && near(p.B, c.B) {
				n++
			}
		}
	}
	return n
}

// ParseHex parses a colour written #rrggbb.
func ParseHex(s string) (color.RGBA, error) {
	if len(s) != 7 || s[0] != '#' {
		return color.RGBA{}, fmt.Errorf("colour %q is not #rrggbb", s)
	}
	v, err := strconv.ParseUint(s[1:], 16, 32)
	if err != nil {
		return color.RGBA{}, fmt.Errorf("colour %q is not #rrggbb", s)
	}
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 255}, nil
}

// Check returns the drawing of doc, or an error if doc is not [Portable],
// if it draws blank or mostly dark (as an opacity a renderer mishandles
// does), or if one of colors (#rrggbb) covers fewer than 20 pixels.
func Check(doc []byte, colors ...string) (*image.RGBA, error) {
	if err := Portable(doc); err != nil {
		return nil, err
	}
	img, err := Rasterize(doc)
	if err != nil {
		return nil, err
	}
	if ink := Ink(img, img.Bounds()); ink < 0.01 {
		return nil, fmt.Errorf("drawing is blank: %.2f%% of pixels are not white", 100*ink)
	}
	if dark := float64(Count(img, color.RGBA{A: 255}, 60)) / float64(img.Bounds().Dx()*img.Bounds().Dy()); dark > 0.2 {
		return nil, fmt.Errorf("%.0f%% of the drawing is near black", 100*dark)
	}
	for _, s := range colors {
		c, err := ParseHex(s)
		if err != nil {
			return nil, err
		}
		if n := Count(img, c, 24); n < 20 {
			return nil, fmt.Errorf("colour %s covers %d pixels, want >= 20", s, n)
		}
	}
	return img, nil
}
