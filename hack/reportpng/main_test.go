package main

import (
	"image"
	"image/color"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The blank rows below a page's end go, with a 16 px margin; a page that fills the window is
// left whole and said to be cut.
func TestTrimBottom(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 10, 100))
	for y := range 100 {
		for x := range 10 {
			img.Set(x, y, color.White)
		}
	}
	img.Set(3, 40, color.Black)
	out, cut := trimBottom(img)
	assert.True(t, cut)
	assert.Equal(t, 57, out.Bounds().Dy())

	img.Set(5, 99, color.Black)
	out, cut = trimBottom(img)
	assert.False(t, cut)
	assert.Equal(t, 100, out.Bounds().Dy())
}
