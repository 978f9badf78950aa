package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/internal/version"
)

func TestVersionText(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, runCLI(context.Background(), &out, "version"))
	in := version.Get()
	assert.Regexp(t, `(?m)^version +`+regexp.QuoteMeta(in.Version)+`$`, out.String())
	// A test binary records no revision: the command says so rather than printing nothing.
	for _, k := range []string{"revision", "time", "modified", "go"} {
		assert.Regexp(t, `(?m)^`+k+` +\S`, out.String())
	}
}

func TestVersionJSON(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, runCLI(context.Background(), &out, "version", "-o", "json"))
	var got version.Info
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&got), out.String())
	assert.Equal(t, version.Get(), got)
	assert.NotEmpty(t, got.Version)
	assert.NotEmpty(t, got.GoVersion)
}
