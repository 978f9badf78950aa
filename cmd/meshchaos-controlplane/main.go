// Command meshchaos-controlplane runs meshchaos's reference xDS control plane, with the flags of
// `meshchaos controlplane`. It is what the control plane's image runs: a binary of its own, so
// the heap measured in experiments is the control plane's and not the harness's (its plotting,
// traffic and substrate packages' init-time allocations); TestLayering keeps it that way.
package main

import (
	"context"
	"os"

	"github.com/meshchaos/meshchaos/controlplane/command"
)

func main() {
	os.Exit(command.Main(context.Background(), "meshchaos-controlplane", os.Args[1:], os.Stdout, os.Stderr))
}
