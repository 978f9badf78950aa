package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// progress shows long steps: on a terminal one live line with the step and its elapsed time;
// in CI (or when not a terminal) plain lines.
type progress struct {
	w      io.Writer
	tty    bool
	mu     sync.Mutex
	line   string
	since  time.Time
	stop   chan struct{}
	closed bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, stop: make(chan struct{})}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) && os.Getenv("CI") == "" {
		p.tty = true
		go p.tick()
	}
	return p
}

// Logf reports a step.
func (p *progress) Logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if !p.tty {
		fmt.Fprintln(p.w, msg)
		return
	}
	if p.line != "" {
		fmt.Fprintf(p.w, "\r\033[K✓ %s\n", p.line)
	}
	p.line, p.since = msg, time.Now()
	p.draw()
}

func (p *progress) draw() {
	fmt.Fprintf(p.w, "\r\033[K… %s (%ds)", p.line, int(time.Since(p.since).Seconds()))
}

func (p *progress) tick() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			if p.line != "" {
				p.draw()
			}
			p.mu.Unlock()
		}
	}
}

// Done ends the live line.
func (p *progress) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.stop)
	if p.tty && p.line != "" {
		fmt.Fprintf(p.w, "\r\033[K✓ %s\n", p.line)
	}
}
