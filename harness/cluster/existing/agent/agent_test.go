package agent

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/internal/prereq"
)

// A session's exec answers the command's stdout, or its failure with the last line of its
// stderr; a command is looked up in the node's PATH under the root, as Exec does.
func TestSessionExec(t *testing.T) {
	prereq.Root(t, "chroot")
	n := node{root: "/", proc: "/proc"}
	r := n.answer(Request{Op: "exec", Argv: []string{"sh", "-c", "echo one; echo two"}})
	require.Empty(t, r.Err)
	assert.Equal(t, "one\ntwo\n", string(r.Data))

	r = n.answer(Request{Op: "exec", Argv: []string{"sh", "-c", "echo first >&2; echo why >&2; exit 3"}})
	assert.Contains(t, r.Err, "exit status 3: why")
	assert.Empty(t, r.Data)

	r = n.answer(Request{Op: "exec", Argv: []string{"no-such-node-tool"}})
	assert.Contains(t, r.Err, "not found in the node's")
}

// Output past the bound is cut and said to be.
func TestBoundedBuffer(t *testing.T) {
	w := boundedBuffer{max: 5}
	n, err := w.Write([]byte("abc"))
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	n, _ = w.Write([]byte("defg"))
	assert.Equal(t, 4, n, "a cut write still reports it all taken, so the command is not killed by EPIPE")
	assert.Equal(t, "abcde", string(w.b))
	assert.True(t, w.cut)
}
