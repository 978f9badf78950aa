package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/images"
)

func init() { register(newImagesCmd) }

func newImagesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "images", Short: "Build the workload images (OCI tarballs, no Docker)"}
	var out, binDir string
	build := &cobra.Command{
		Use:   "build [NAME…]",
		Short: "Write bin/images/<name>.tar for every catalog image (or the named ones)",
		RunE: func(cmd *cobra.Command, args []string) error {
			specs := images.Catalog
			if len(args) > 0 {
				specs = nil
				for _, a := range args {
					s, ok := images.Lookup(a)
					if !ok {
						return Usagef("unknown image %q (known: %s)", a, imageNames())
					}
					specs = append(specs, s)
				}
			}
			if binDir == "" {
				binDir = filepath.Dir(out)
			}
			b := &images.Builder{BinDir: binDir}
			paths, err := b.Build(out, specs)
			for _, p := range paths {
				fmt.Fprintln(cmd.OutOrStdout(), "image:", p)
			}
			return err
		},
	}
	build.Flags().StringVar(&out, "out", "bin/images", "output directory")
	build.Flags().StringVar(&binDir, "bin-dir", "", "directory with the pause and coredns binaries (default: the parent of --out)")
	cmd.AddCommand(build)
	return cmd
}

func imageNames() string {
	var s string
	for i, sp := range images.Catalog {
		if i > 0 {
			s += ", "
		}
		s += sp.Name
	}
	return s
}
