package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/harness/cluster/kind"
	"github.com/meshchaos/meshchaos/harness/cluster/kind/nodeimage"
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
	build.Flags().StringVar(&out, "out", "bin/images", "the directory to write the image tarballs (NAME.tar) into")
	build.Flags().StringVar(&binDir, "bin-dir", "", "directory with the pause, coredns and meshchaos-controlplane binaries (default: the parent of --out)")
	cmd.AddCommand(build, newImagesBinaryCmd(), newKindNodeImageCmd())
	return cmd
}

// newImagesBinaryCmd packages a static executable meshchaos does not build (istio's
// pilot-discovery: hack/istiod/build.sh) with the same layer code as the catalog's images.
func newImagesBinaryCmd() *cobra.Command {
	var b images.Binary
	var out string
	cmd := &cobra.Command{
		Use:   "binary --ref REF --binary PATH --at /IN/IMAGE --out FILE.tar [--user UID:GID] [--label K=V]… [-- ARG…]",
		Short: "Write an image tarball of one static executable outside the catalog (entrypoint: --at, then ARGs)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if b.Ref == "" || b.Path == "" || b.At == "" || out == "" {
				return Usagef("--ref, --binary, --at and --out are required")
			}
			b.Args = args
			if err := images.BuildBinary(b, out); err != nil {
				return WithExitCode(2, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "image:", out, b.Ref)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&b.Ref, "ref", "", "the image's reference, e.g. "+images.Registry+"/istio/pilot:2026-08")
	f.StringVar(&b.Path, "binary", "", "the static executable to package")
	f.StringVar(&b.At, "at", "", "its absolute path in the image, e.g. /usr/local/bin/pilot-discovery")
	f.StringVar(&b.User, "user", "", "the image's user, numeric UID[:GID] (default root)")
	f.StringToStringVar(&b.Labels, "label", nil, "image label K=V (repeatable)")
	f.StringVar(&out, "out", "", "the image tarball to write (a file)")
	return cmd
}

func newKindNodeImageCmd() *cobra.Command {
	var rootfs, binDir, out, work, inputs string
	var printRef bool
	cmd := &cobra.Command{
		Use:   "kind-node --rootfs ROOTFS.tar --bin-dir DIR --out IMAGE.tar",
		Short: "Build the kind node image (" + kind.LocalImage + ") as a Docker-loadable tarball, no registry ('make kind-node-image')",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printRef {
				fmt.Fprintln(cmd.OutOrStdout(), kind.LocalImage)
				return nil
			}
			if rootfs == "" || binDir == "" || out == "" {
				return Usagef("--rootfs, --bin-dir and --out are required (see 'make kind-node-image')")
			}
			if work == "" {
				work = filepath.Join(filepath.Dir(out), "work")
			}
			logf := func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }
			return nodeimage.Build(nodeimage.Config{Rootfs: rootfs, BinDir: binDir, Version: kind.KubernetesVersion,
				Ref: kind.LocalImage, WorkDir: work, Inputs: inputs, Logf: logf}, out)
		},
	}
	cmd.Flags().StringVar(&rootfs, "rootfs", "", "Debian root filesystem tarball (hack/kindnode/rootfs.sh)")
	cmd.Flags().StringVar(&binDir, "bin-dir", "", "directory with the Kubernetes binaries, etcd, coredns, pause and runcwrap")
	cmd.Flags().StringVar(&out, "out", "", "the image tarball to write (a file)")
	cmd.Flags().StringVar(&inputs, "inputs", "", "a digest of the inputs, kept as a label so a rebuild can be skipped")
	cmd.Flags().BoolVar(&printRef, "print-ref", false, "print the image's reference and exit")
	cmd.Flags().StringVar(&work, "work", "", "directory for intermediate files (default: work/ beside --out)")
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
