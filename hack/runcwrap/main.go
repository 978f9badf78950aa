// Command runcwrap is a runc wrapper for machines whose capability bounding set lacks a
// capability that privileged containers ask for (on our CI VM: CAP_SYS_RESOURCE). runc fails
// such a container with "unable to apply caps: operation not permitted", because a process can
// never gain a capability outside its bounding set. The wrapper removes from the container's
// config.json (create, run) and from the --process file (exec) every capability the wrapper's own
// bounding set lacks, then execs the real runc with the same arguments. Where the bounding set is
// full it changes nothing, so it is harmless on a normal Docker host.
//
// hack/docker.sh registers it as dockerd's default runtime; the kind node image uses it as
// containerd's runc so privileged pods (kube-proxy, CNI) start in a node as well.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames are the capabilities by number (linux/capability.h), as the OCI spec names them.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

func main() {
	real := realRunc()
	if missing := missingCaps(); len(missing) > 0 {
		if err := rewrite(os.Args[1:], missing); err != nil {
			fmt.Fprintf(os.Stderr, "runcwrap: %v\n", err)
			os.Exit(1)
		}
	}
	argv := append([]string{real}, os.Args[1:]...)
	if err := syscall.Exec(real, argv, os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "runcwrap: exec %s: %v\n", real, err)
		os.Exit(1)
	}
}

// realRunc is the runc this wraps: RUNCWRAP_RUNC, else the distribution's.
func realRunc() string {
	if p := os.Getenv("RUNCWRAP_RUNC"); p != "" {
		return p
	}
	for _, p := range []string{"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc"} {
		if self, _ := os.Executable(); p == self {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "/usr/sbin/runc"
}

// missingCaps names the capabilities outside this process's bounding set.
func missingCaps() map[string]bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		bnd, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return nil
		}
		missing := map[string]bool{}
		for i, name := range capNames {
			if bnd&(1<<uint(i)) == 0 {
				missing[name] = true
			}
		}
		return missing
	}
	return nil
}

// rewrite edits the spec file the runc subcommand in args reads.
func rewrite(args []string, missing map[string]bool) error {
	cmd, rest := subcommand(args)
	switch cmd {
	case "create", "run":
		bundle := flagValue(rest, "bundle", "b")
		if bundle == "" {
			bundle = "."
		}
		return editJSON(filepath.Join(bundle, "config.json"), func(spec map[string]any) {
			if proc, ok := spec["process"].(map[string]any); ok {
				dropCaps(proc, missing)
			}
		})
	case "exec":
		if p := flagValue(rest, "process", "p"); p != "" {
			return editJSON(p, func(proc map[string]any) { dropCaps(proc, missing) })
		}
	}
	return nil
}

// subcommand skips runc's global flags (all of which but the booleans take a value).
func subcommand(args []string) (string, []string) {
	boolFlags := map[string]bool{"--debug": true, "--systemd-cgroup": true, "--help": true, "-h": true, "--version": true, "-v": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a, args[i+1:]
		}
		if !boolFlags[a] && !strings.Contains(a, "=") {
			i++
		}
	}
	return "", nil
}

// flagValue finds --long VALUE, --long=VALUE, -s VALUE.
func flagValue(args []string, long, short string) string {
	for i, a := range args {
		for _, f := range []string{"--" + long, "-" + long, "-" + short} {
			if a == f && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, f+"="); ok {
				return v
			}
		}
	}
	return ""
}

func editJSON(path string, edit func(map[string]any)) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	edit(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}

// dropCaps removes the missing capabilities from an OCI process's capability sets.
func dropCaps(proc map[string]any, missing map[string]bool) {
	caps, ok := proc["capabilities"].(map[string]any)
	if !ok {
		return
	}
	for set, v := range caps {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := list[:0]
		for _, c := range list {
			if s, _ := c.(string); !missing[s] {
				kept = append(kept, c)
			}
		}
		caps[set] = kept
	}
}
