// Command meshchaos is a chaos and load testing harness for service-mesh (xDS) control planes.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/meshchaos/meshchaos/cmd/meshchaos/cli"
)

func main() {
	err := cli.Execute()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "meshchaos:", err)
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		os.Exit(ec.ExitCode())
	}
	os.Exit(2)
}
