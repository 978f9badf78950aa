package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

const events = `{"Time":"2026-11-25T10:00:00Z","Action":"start","Package":"github.com/meshchaos/meshchaos/a"}
{"Time":"2026-11-25T10:00:00Z","Action":"run","Package":"github.com/meshchaos/meshchaos/a","Test":"TestSlow"}
{"Time":"2026-11-25T10:00:09Z","Action":"pass","Package":"github.com/meshchaos/meshchaos/a","Test":"TestSlow","Elapsed":9}
{"Time":"2026-11-25T10:00:09Z","Action":"run","Package":"github.com/meshchaos/meshchaos/a","Test":"TestDocker"}
{"Time":"2026-11-25T10:00:09Z","Action":"output","Package":"github.com/meshchaos/meshchaos/a","Test":"TestDocker","Output":"=== RUN   TestDocker\n"}
{"Time":"2026-11-25T10:00:09Z","Action":"output","Package":"github.com/meshchaos/meshchaos/a","Test":"TestDocker","Output":"    a_test.go:9: no docker here\n"}
{"Time":"2026-11-25T10:00:09Z","Action":"output","Package":"github.com/meshchaos/meshchaos/a","Test":"TestDocker","Output":"--- SKIP: TestDocker (0.00s)\n"}
{"Time":"2026-11-25T10:00:09Z","Action":"skip","Package":"github.com/meshchaos/meshchaos/a","Test":"TestDocker","Elapsed":0}
{"Time":"2026-11-25T10:00:10Z","Action":"pass","Package":"github.com/meshchaos/meshchaos/a","Elapsed":10}
`

const failing = `{"Time":"2026-11-25T10:00:10Z","Action":"run","Package":"github.com/meshchaos/meshchaos/b","Test":"TestBroken"}
{"Time":"2026-11-25T10:00:10Z","Action":"output","Package":"github.com/meshchaos/meshchaos/b","Test":"TestBroken","Output":"    b_test.go:3: want 1, got 2\n"}
{"Time":"2026-11-25T10:00:11Z","Action":"fail","Package":"github.com/meshchaos/meshchaos/b","Test":"TestBroken","Elapsed":1}
{"Time":"2026-11-25T10:00:11Z","Action":"fail","Package":"github.com/meshchaos/meshchaos/b","Elapsed":1}
`

func TestSkipsCountAndFailInCI(t *testing.T) {
	var out bytes.Buffer
	assert.Equal(t, 0, run(strings.NewReader(events), &out, io.Discard, "1", false))
	text := out.String()
	assert.Contains(t, text, "1 tests passed, 0 failed, 1 skipped")
	assert.Contains(t, text, "SKIP a TestDocker: a_test.go:9: no docker here")
	assert.Contains(t, text, "9.0s  a TestSlow")

	out.Reset()
	assert.Equal(t, 1, run(strings.NewReader(events), &out, io.Discard, "1", true), "a skip fails in CI")
	assert.Contains(t, out.String(), "1 tests skipped where none may")
}

func TestFailuresShowTheirOutputAndFail(t *testing.T) {
	var out, saved bytes.Buffer
	assert.Equal(t, 1, run(strings.NewReader(events+failing), &out, &saved, "1", false))
	assert.Contains(t, out.String(), "--- FAIL b TestBroken (1.0s)\n        b_test.go:3: want 1, got 2")
	assert.Contains(t, out.String(), "1 packages failed")
	assert.Equal(t, events+failing, saved.String(), "the events are kept as they came")
}

// A test whose subtests ran in parallel says Elapsed 0; it took until its end.
func TestParallelParentTakesUntilItsEnd(t *testing.T) {
	var out bytes.Buffer
	ev := `{"Time":"2026-11-25T10:00:00Z","Action":"run","Package":"github.com/meshchaos/meshchaos/e","Test":"TestBothWays"}
{"Time":"2026-11-25T10:08:00Z","Action":"pass","Package":"github.com/meshchaos/meshchaos/e","Test":"TestBothWays","Elapsed":0}
`
	assert.Equal(t, 0, run(strings.NewReader(ev), &out, io.Discard, "1", false))
	assert.Contains(t, out.String(), "PASS e TestBothWays (480.0s)")
	assert.Contains(t, out.String(), "480.0s  e TestBothWays")
}

func TestNoTestsIsAFailure(t *testing.T) {
	var out bytes.Buffer
	assert.Equal(t, 1, run(strings.NewReader("go: downloading x\n"), &out, io.Discard, "1", false))
	assert.Contains(t, out.String(), "go: downloading x")
	assert.Contains(t, out.String(), "no test ran")
}

func TestACutOffRunFails(t *testing.T) {
	var out bytes.Buffer
	cut := `{"Action":"run","Package":"github.com/meshchaos/meshchaos/c","Test":"TestHangs"}` + "\n"
	assert.Equal(t, 1, run(strings.NewReader(events+cut), &out, io.Discard, "1", false))
	assert.Contains(t, out.String(), "UNFINISHED c TestHangs")
}
