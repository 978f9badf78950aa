// Command reportpng renders a run's report.html to a PNG, as a browser shows it, for the figures
// in docs/ (make report-png RUN=DIR OUT=FILE). It runs headless Chromium (Debian's chromium
// package: `apt-get install chromium`) on a tall window and then cuts the blank rows below the
// page's end: a headless screenshot cannot size itself to the page.
//
//	go run ./hack/reportpng -o docs/figures/cp-oom-restart-report.png RUN_DIR/report.html
package main

import (
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
)

func main() {
	out := flag.String("o", "", "the PNG to write")
	width := flag.Int("width", 1280, "the window's width in pixels")
	maxHeight := flag.Int("max-height", 16000, "the tallest page rendered, in pixels (a longer page is cut there, and the command says so)")
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: reportpng -o OUT.png RUN_DIR/report.html")
		os.Exit(2)
	}
	if err := render(flag.Arg(0), *out, *width, *maxHeight); err != nil {
		fmt.Fprintln(os.Stderr, "reportpng:", err)
		os.Exit(1)
	}
}

func render(report, out string, width, maxHeight int) error {
	abs, err := filepath.Abs(report)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("the report: %w", err)
	}
	browser, err := findChromium()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "reportpng")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	shot := filepath.Join(tmp, "page.png")
	// --no-sandbox: Chromium refuses to run as root with its sandbox, and make runs as root here.
	cmd := exec.Command(browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(tmp, "profile"),
		fmt.Sprintf("--window-size=%d,%d", width, maxHeight), "--screenshot="+shot, "file://"+abs)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", browser, err, b)
	}
	f, err := os.Open(shot)
	if err != nil {
		return fmt.Errorf("chromium wrote no screenshot: %w", err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("read the screenshot: %w", err)
	}
	trimmed, cut := trimBottom(img)
	if !cut {
		fmt.Fprintf(os.Stderr, "reportpng: the page is taller than %d px and was cut there (raise -max-height)\n", maxHeight)
	}
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := png.Encode(w, trimmed); err != nil {
		w.Close()
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := w.Close(); err != nil {
		return err
	}
	fmt.Printf("%s: %dx%d\n", out, trimmed.Bounds().Dx(), trimmed.Bounds().Dy())
	return nil
}

func findChromium() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium found: install it (Debian: apt-get install chromium)")
}

// trimBottom cuts the rows below the last one that differs from the bottom row (the page's
// background), keeping a margin of 16 px; cut reports whether there were any such rows, that is
// whether the page ended inside the window.
func trimBottom(img image.Image) (out image.Image, cut bool) {
	b := img.Bounds()
	bg := img.At(b.Min.X, b.Max.Y-1)
	last := b.Max.Y - 1
	for ; last >= b.Min.Y; last-- {
		if !rowIs(img, last, bg) {
			break
		}
	}
	if last == b.Max.Y-1 {
		return img, false
	}
	end := min(last+1+16, b.Max.Y)
	sub, ok := img.(interface {
		SubImage(image.Rectangle) image.Image
	})
	if !ok {
		return img, true
	}
	return sub.SubImage(image.Rect(b.Min.X, b.Min.Y, b.Max.X, end)), true
}

func rowIs(img image.Image, y int, c color.Color) bool {
	r0, g0, b0, a0 := c.RGBA()
	for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
		r, g, b, a := img.At(x, y).RGBA()
		if r != r0 || g != g0 || b != b0 || a != a0 {
			return false
		}
	}
	return true
}
