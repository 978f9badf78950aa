package runner

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/meshchaos/meshchaos/harness/traffic"
)

// Progress shows a run as it goes: on a terminal a live status line (phase, elapsed, a bar for
// the load), in CI plain timestamped lines.
type Progress interface {
	// Phase reports that a phase started.
	Phase(name string)
	// Traffic reports an attack's running totals (about once a second).
	Traffic(p traffic.Progress)
	// Logf prints a line (events, warnings).
	Logf(format string, args ...any)
	// Done ends the display.
	Done()
}

// NewProgress picks the display for w: plain lines in CI (CI set, as CI systems do with
// CI=true) or when w is not a terminal.
func NewProgress(w io.Writer) Progress {
	start := time.Now()
	if os.Getenv("CI") != "" || !isTerminal(w) {
		return &plainProgress{w: w, start: start}
	}
	return &termProgress{w: w, start: start}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func elapsed(start time.Time) string {
	d := time.Since(start).Round(time.Second)
	return fmt.Sprintf("%02d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

// plainProgress writes one line per phase and event, and traffic totals every 10 s.
type plainProgress struct {
	mu        sync.Mutex
	w         io.Writer
	start     time.Time
	lastTraff time.Time
}

func (p *plainProgress) Phase(name string) { p.Logf("phase %s", name) }

func (p *plainProgress) Traffic(t traffic.Progress) {
	p.mu.Lock()
	due := time.Since(p.lastTraff) >= 10*time.Second
	if due {
		p.lastTraff = time.Now()
	}
	p.mu.Unlock()
	if due {
		p.Logf("traffic %s/%s: %d requests, %d errors", t.Elapsed.Round(time.Second), t.Duration, t.Requests, t.Errors)
	}
}

func (p *plainProgress) Logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%s] %s\n", elapsed(p.start), fmt.Sprintf(format, args...))
}

func (p *plainProgress) Done() {}

// termProgress keeps a status line at the bottom, rewritten in place; log lines scroll above it.
type termProgress struct {
	mu      sync.Mutex
	w       io.Writer
	start   time.Time
	phase   string
	traffic *traffic.Progress
	done    bool // after Done, lines still print but the status line is not drawn again
}

func (p *termProgress) Phase(name string) {
	p.mu.Lock()
	p.phase, p.traffic = name, nil
	p.mu.Unlock()
	p.Logf("phase %s", name)
}

func (p *termProgress) Traffic(t traffic.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.traffic = &t
	p.redraw()
}

func (p *termProgress) Logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r\x1b[2K[%s] %s\n", elapsed(p.start), fmt.Sprintf(format, args...))
	p.redraw()
}

func (p *termProgress) redraw() {
	if p.done {
		return
	}
	line := fmt.Sprintf("%s  %s", elapsed(p.start), p.phase)
	if t := p.traffic; t != nil && t.Duration > 0 {
		frac := min(1, t.Elapsed.Seconds()/t.Duration.Seconds())
		const width = 24
		n := int(frac * width)
		line += fmt.Sprintf("  [%s%s] %3.0f%%  %d req  %d err", strings.Repeat("█", n), strings.Repeat("░", width-n), 100*frac, t.Requests, t.Errors)
	}
	fmt.Fprintf(p.w, "\r\x1b[2K%s", line)
}

func (p *termProgress) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	fmt.Fprint(p.w, "\r\x1b[2K")
}
