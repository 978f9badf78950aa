// Package command is the reference control plane's command line: its flags, their checks (bad
// input is exit code 2, refused before anything starts) and the run until SIGINT or SIGTERM.
// `meshchaos controlplane` and the meshchaos-controlplane binary (what the control plane's image
// runs) are both built from it, so the image carries the control plane and none of the harness.
package command

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshchaos/meshchaos/controlplane"
	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/controlplane/rootcert"
	"github.com/meshchaos/meshchaos/controlplane/webhook"
	"github.com/meshchaos/meshchaos/controlplane/xds"
)

// UsageError is bad input: the process ends with exit code 2. Its ExitCode method is what
// meshchaos's CLI (cli.ExitCoder) and Main read.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ExitCode is 2, the exit code of bad input.
func (e *UsageError) ExitCode() int { return 2 }

// usagef is a UsageError with a formatted message.
func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// New returns the command that runs the reference control plane, named use (`controlplane`
// under meshchaos, `meshchaos-controlplane` as a program of its own).
func New(use string) *cobra.Command {
	var (
		kubeconfig, xdsAddr, adminAddr, readyAddr, domain, logLevel string
		syncGate, noRouteDefaults                                   bool
		pushThrottle, ballastMax                                    int
		generation                                                  string
		limits                                                      xds.Limits
		maxWait, quiet, debounceMax                                 time.Duration
		switches                                                    []string
		wh                                                          webhook.Options
		injectMode                                                  string
		secure                                                      controlplane.SecureXDS
		namespace, caSecret                                         string
	)
	cmd := &cobra.Command{
		Use:   use,
		Short: "Run the reference sync-gated xDS control plane",
		Long: `Run meshchaos's reference xDS control plane: it watches Services, EndpointSlices, Pods,
ServiceEntries and WorkloadEntries and serves Envoy sidecars/gateways and proxyless gRPC over ADS
(State of the World and Delta). Until its informers have synced and every initial event is in the
model, /ready answers 503 and xDS streams are refused (the sync gate).

Regression switches (--regress NAME, repeatable) re-create historical bugs:
  ungated                         serve xDS before sync (incident 1)
  gate-before-events              open the gate at informer sync, before the initial events are applied (incident 1; istio 1.7–1.8)
  full-push-on-endpoint-reappear  endpoints 0→N force a full push (incident 2; istio 1.12.3–1.13, 1.14.2–1.15.0)
  quadratic-scope                 per-service copies of the registry, O(n²) memory (incident 4)
  se-endpoint-port                after an endpoint delete, EDS uses the ServiceEntry port
  we-stale-label                  a relabelled WorkloadEntry stays behind its old ServiceEntry

--generation=per-proxy is a configuration, not a bug: every proxy's CDS/LDS/RDS response is
generated and encoded for that proxy (istio ≤ 1.14's unit of a push) instead of once per scope.

In a cluster it uses the pod's service account; outside one give --kubeconfig.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			set, err := regress.Parse(switches)
			if err != nil {
				return usagef("%v", err)
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usagef("bad --log-level %q: use debug, info, warn or error", logLevel)
			}
			if quiet < 0 || debounceMax < 0 || maxWait < 0 {
				return usagef("durations must not be negative")
			}
			if !cmd.Flags().Changed("xds-new-stream-rate") {
				if v, ok := os.LookupEnv(xds.RequestLimitEnv); ok && v != "" {
					r, err := strconv.ParseFloat(v, 64)
					if err != nil || r < 0 {
						return usagef("$%s=%q: give a number of new xDS streams a second (0: istiod's default from GOMAXPROCS)", xds.RequestLimitEnv, v)
					}
					limits.NewStreamsPerSecond = r // 0 is the default, as in istiod
				}
			}
			gen, err := xds.ParseGeneration(generation)
			if err != nil {
				return usagef("--generation: %v", err)
			}
			if pushThrottle < 1 {
				return usagef("--push-throttle must be at least 1 (istiod's default is 100)")
			}
			// Checked with or without --webhook-addr: a typo is refused, not kept for later.
			mode, err := webhook.ParseStartMode(injectMode)
			if err != nil {
				return usagef("--inject-default-mode %q: choose %s, %s or %s", injectMode, webhook.StartNone, webhook.StartHold, webhook.StartNative)
			}
			var secureOpts *controlplane.SecureXDS
			if secure.Addr != "" {
				if len(secure.DNSNames) == 0 {
					return usagef("--secure-xds-addr needs --secure-xds-dns: the name proxies verify, meshchaos-controlplane.NAMESPACE.svc")
				}
				if secure.Audience == "" || secure.RootConfigMap == "" {
					return usagef("--xds-audience and --root-cert-configmap must not be empty with --secure-xds-addr")
				}
				if _, err := labels.Parse(secure.RootNamespaces); err != nil {
					return usagef("--root-cert-namespaces %q: %v (a label selector, e.g. meshchaos.io/run or meshchaos.io/run=NAME; empty: every namespace)", secure.RootNamespaces, err)
				}
				secureOpts = &secure
			}
			if caSecret != "" && namespace == "" {
				return usagef("--ca-secret needs the control plane's namespace: give --namespace (in a pod, set POD_NAMESPACE)")
			}
			if wh.Sidecar.RootConfigMap != "" && wh.Sidecar.TokenAudience == "" {
				return usagef("--inject-xds-audience must not be empty with --inject-xds-root-configmap")
			}
			cfg, err := kubeConfig(kubeconfig)
			if err != nil {
				return usagef("%v", err)
			}
			var whOpts *webhook.Options
			if wh.Addr != "" {
				if wh.Sidecar.Image == "" || wh.Sidecar.XDSAddress == "" {
					return usagef("--webhook-addr needs --inject-image and --inject-xds-address (what the injected sidecar runs and dials)")
				}
				wh.Sidecar.DefaultMode = mode
				whOpts = &wh
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cp, err := controlplane.Start(ctx, controlplane.Options{Kube: cfg, XDSAddr: xdsAddr, AdminAddr: adminAddr, ReadyAddr: readyAddr,
				SyncGate: syncGate, MaxWait: maxWait, DebounceQuiet: quiet, DebounceMax: debounceMax,
				Regress: set, NoRouteDefaults: noRouteDefaults, PushThrottle: pushThrottle, Generation: gen, XDSLimits: limits, DomainSuffix: domain, Logger: log, Webhook: whOpts,
				BallastMaxMiB: ballastMax, SecureXDS: secureOpts, Namespace: namespace, CASecret: caSecret})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "controlplane: xDS on %s, admin on %s\n", cp.XDSAddr(), cp.AdminAddr())
			if a := cp.SecureXDSAddr(); a != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "controlplane: secure xDS (TLS, token audience %s) on %s\n", secure.Audience, a)
			}
			<-ctx.Done()
			cp.Stop()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config, then $KUBECONFIG)")
	f.StringVar(&xdsAddr, "xds-addr", "127.0.0.1:15010", "xDS (gRPC) listen address; in a pod give the pod IP, e.g. $(POD_IP):15010")
	f.StringVar(&adminAddr, "admin-addr", "127.0.0.1:15014", "admin HTTP listen address (/ready, /metrics, /debug/pprof, /debug/config_dump)")
	f.StringVar(&readyAddr, "ready-addr", "", "serve /ready alone on this address too, as istiod on its port 8080 where its chart's readiness probe asks, e.g. $(POD_IP):8080; empty: /ready on the admin port only")
	f.IntVar(&ballastMax, "ballast-max", 0, "allow the memory ballast on the admin port (/debug/ballast, a chaos hook that grows the heap until the OOM kill) up to this many MiB; 0: off")
	f.BoolVar(&syncGate, "sync-gate", true, "refuse xDS and report not ready until the informers have synced (false: historical behaviour)")
	f.DurationVar(&maxWait, "sync-max-wait", 0, "open the sync gate anyway after this long, serving a possibly incomplete config; 0: wait for sync however long it takes, as istiod does")
	f.DurationVar(&quiet, "debounce", 100*time.Millisecond, "push debounce quiet period")
	f.DurationVar(&debounceMax, "debounce-max", 10*time.Second, "longest a change waits in debounce")
	f.StringArrayVar(&switches, "regress", nil, "enable a regression switch (repeatable): "+fmt.Sprint(regress.Names()))
	f.IntVar(&pushThrottle, "push-throttle", 100, "responses sent at once, across every proxy (istiod's PILOT_PUSH_THROTTLE)")
	f.StringVar(&generation, "generation", string(xds.PerScope), "where CDS/LDS/RDS are generated: per-scope (once per scope, shared by its proxies) or per-proxy (again for every proxy's response, as istio ≤ 1.14: a full push costs a generation per proxy)")
	f.DurationVar(&limits.SendTimeout, "xds-send-timeout", xds.DefaultLimits.SendTimeout, "close the stream of a proxy that reads nothing for this long (a slow consumer)")
	f.IntVar(&limits.MaxStreams, "xds-max-streams", xds.DefaultLimits.MaxStreams, "most open xDS streams; more are refused with ResourceExhausted")
	f.Float64Var(&limits.RequestsPerSecond, "xds-max-request-rate", xds.DefaultLimits.RequestsPerSecond, fmt.Sprintf("most requests a second on one xDS stream (bursts of up to %d); a stream beyond is closed", xds.DefaultLimits.RequestBurst))
	f.Float64Var(&limits.NewStreamsPerSecond, "xds-new-stream-rate", xds.DefaultLimits.NewStreamsPerSecond,
		fmt.Sprintf("new xDS streams accepted a second (burst %d; a stream waits up to 1 s, then is refused with ResourceExhausted); default istiod's: 15+5·GOMAXPROCS, at most 100, or $%s; 0: that default; negative: no bound",
			xds.RequestBurst, xds.RequestLimitEnv))
	f.IntVar(&limits.MaxScopes, "xds-max-scopes", xds.DefaultLimits.MaxScopes, "most proxy scopes (namespaces with their own generated config)")
	f.IntVar(&limits.NameSlack, "xds-name-slack", xds.DefaultLimits.NameSlack, "a subscription may name at most twice the most clusters served plus this many")
	f.BoolVar(&noRouteDefaults, "no-route-defaults", false, "leave istiod's default retry policy (2 retries on connect-failure,refused-stream,unavailable,cancelled,503) and route timeout 0 out of generated routes")
	f.StringVar(&domain, "domain-suffix", "cluster.local", "cluster DNS domain")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&wh.Addr, "webhook-addr", "", "serve the admission webhooks (HTTPS, own CA) on this address, e.g. $(POD_IP):15017; empty: no webhooks")
	f.StringArrayVar(&wh.DNSNames, "webhook-dns", nil, "DNS name in the webhook serving certificate (repeatable): the Service the apiserver dials, NAME.NAMESPACE.svc")
	f.IPSliceVar(&wh.IPs, "webhook-ip", nil, "IP in the webhook serving certificate (for a url clientConfig)")
	f.StringVar(&wh.MutatingConfig, "mutating-webhook-config", "", "MutatingWebhookConfiguration whose caBundle this control plane keeps set")
	f.StringVar(&wh.ValidatingConfig, "validating-webhook-config", "", "ValidatingWebhookConfiguration whose caBundle this control plane keeps set")
	f.StringVar(&wh.Sidecar.Image, "inject-image", "", "image of the injected sidecar (xdsproxy)")
	f.StringVar(&wh.Sidecar.PullPolicy, "inject-pull-policy", "IfNotPresent", "pull policy of the injected sidecar")
	f.StringVar(&wh.Sidecar.XDSAddress, "inject-xds-address", "", "xDS address HOST:PORT the injected sidecars dial")
	f.StringVar(&wh.Sidecar.RootConfigMap, "inject-xds-root-configmap", "", "dial secure xDS from injected sidecars: mount this root ConfigMap (e.g. "+rootcert.DefaultConfigMap+") and a projected token; empty: plaintext")
	f.StringVar(&wh.Sidecar.XDSServerName, "inject-xds-server-name", "", "TLS server name injected sidecars verify (default: the host of --inject-xds-address)")
	f.StringVar(&wh.Sidecar.TokenAudience, "inject-xds-audience", xds.DefaultAudience, "audience of the injected sidecars' projected token")
	f.StringVar(&secure.Addr, "secure-xds-addr", "", "serve xDS over TLS with ServiceAccount token authentication too (istiod's 15012), e.g. $(POD_IP):15012; empty: off")
	f.StringArrayVar(&secure.DNSNames, "secure-xds-dns", nil, "DNS name in the secure xDS serving certificate (repeatable): what proxies verify, meshchaos-controlplane.NAMESPACE.svc")
	f.StringVar(&secure.Audience, "xds-audience", xds.DefaultAudience, "audience the proxies' tokens must have on the secure xDS port (istiod's istio-ca)")
	f.StringVar(&secure.RootConfigMap, "root-cert-configmap", rootcert.DefaultConfigMap, "ConfigMap the root certificate is published as (key "+rootcert.Key+"); never istio-ca-root-cert, which istiod owns")
	f.StringVar(&secure.RootNamespaces, "root-cert-namespaces", "", "label selector of the namespaces the root ConfigMap is written into, e.g. meshchaos.io/run=NAME; empty: every namespace")
	f.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the control plane's own namespace (where --ca-secret lives; default $POD_NAMESPACE)")
	f.StringVar(&caSecret, "ca-secret", "", "Secret in --namespace holding the CA every replica shares (created by the first); empty: a CA of this process's own, in memory")
	f.StringVar(&injectMode, "inject-default-mode", "none", "sidecar start mode of pods without the "+webhook.StartAnnotation+" annotation: none, hold or native")
	return cmd
}

// Main runs the command as a program of its own, named name, with args (without the program
// name), and returns its exit code: 0 after a clean stop, 2 on bad input (a flag, an argument or
// a value refused, with the message on stderr) or when the control plane could not start, as
// `meshchaos controlplane` ends.
func Main(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	cmd := New(name)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	// As the root, cobra's flag and argument errors are ours to turn into exit code 2.
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usagef("%v (see '%s --help')", err, c.CommandPath())
	})
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("%s takes no arguments, got %q (see '%s --help')", c.CommandPath(), args, c.CommandPath())
		}
		return nil
	}
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	// Bad input (a UsageError) and a control plane that could not start both end with 2:
	// meshchaos's contract for "the run could not be carried out".
	return 2
}

// Kubernetes client limits as istiod's (pilot-discovery --kubernetesApiQPS 80,
// --kubernetesApiBurst 160): client-go's default of 5 a second held every new secure stream's
// TokenReview in a queue, a fleet of 1000 proxies for minutes.
const (
	kubeQPS   = 80
	kubeBurst = 160
)

// kubeConfig loads --kubeconfig, else the in-cluster config, else $KUBECONFIG / ~/.kube/config,
// with istiod's client limits.
func kubeConfig(path string) (*rest.Config, error) {
	cfg, err := loadKubeConfig(path)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = kubeQPS, kubeBurst
	return cfg, nil
}

func loadKubeConfig(path string) (*rest.Config, error) {
	if path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("load --kubeconfig %s: %w", path, err)
		}
		return cfg, nil
	}
	if cfg, err := rest.InClusterConfig(); err == nil {
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(),
		&clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes config: not in a cluster and no kubeconfig found; give --kubeconfig: %w", err)
	}
	return cfg, nil
}
