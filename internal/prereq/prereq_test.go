package prereq

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// recorder is a testing.TB that records how it was ended instead of ending the goroutine.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped = true
	r.msg = args[0].(string)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	r.msg = format
}

func TestMissingFailsInCIAndSkipsElsewhere(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	Missing(r, "no %s", "docker")
	assert.True(t, r.skipped)
	assert.False(t, r.failed)
	assert.Equal(t, "no docker", r.msg)

	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	Missing(r, "no %s", "docker")
	assert.True(t, r.failed)
	assert.False(t, r.skipped)
}

func TestIntegrationFollowsTheVariable(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv(SkipIntegration, "1")
	r := &recorder{TB: t}
	Integration(r)
	assert.True(t, r.skipped)

	t.Setenv(SkipIntegration, "")
	r = &recorder{TB: t}
	Integration(r)
	assert.False(t, r.skipped || r.failed)
}
