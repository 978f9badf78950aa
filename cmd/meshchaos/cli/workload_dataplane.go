package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshchaos/meshchaos/workloads/adsload"
	"github.com/meshchaos/meshchaos/workloads/grpcclient"
	"github.com/meshchaos/meshchaos/workloads/startupapp"
	"github.com/meshchaos/meshchaos/workloads/xdscred"
	"github.com/meshchaos/meshchaos/workloads/xdsproxy"
)

func init() {
	registerWorkload(newXDSProxyCmd)
	registerWorkload(newStartupAppCmd)
	registerWorkload(newADSLoadCmd)
	registerWorkload(newGRPCClientCmd)
}

// signalContext ends on SIGTERM/SIGINT: how kubelet stops a container.
func signalContext(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	return signal.NotifyContext(parent, syscall.SIGTERM, syscall.SIGINT)
}

func workloadLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, Usagef("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// addXDSCredFlags adds the flags of a secure xDS port, as Istio mounts its files in a sidecar.
func addXDSCredFlags(f *pflag.FlagSet, o *xdscred.Options) {
	f.StringVar(&o.RootCertFile, "xds-root-cert", os.Getenv("XDS_ROOT_CERT"),
		"speak TLS to the xDS server, trusting only the root certificate(s) in this PEM file, read at every connection (Istio: /var/run/secrets/istio/root-cert.pem; env XDS_ROOT_CERT)")
	f.StringVar(&o.TokenFile, "xds-token", os.Getenv("XDS_TOKEN"),
		"send this file's token as 'authorization: Bearer' on every stream, read each time (Istio: /var/run/secrets/tokens/istio-token, a projected ServiceAccount token with audience istio-ca); needs --xds-root-cert (env XDS_TOKEN)")
	f.StringVar(&o.ServerName, "xds-server-name", os.Getenv("XDS_SERVER_NAME"),
		"the name the server's certificate must carry when --xds is not that name, e.g. istiod.istio-system.svc; needs --xds-root-cert (env XDS_SERVER_NAME)")
}

// xdsClientSetup is what every xDS client workload does with its common flags: --metadata
// (JSON) into md, the logger at --log-level, the credentials' flags checked.
func xdsClientSetup(metadata string, md *map[string]any, logLevel string, cred xdscred.Options) (*slog.Logger, error) {
	if metadata != "" {
		if err := json.Unmarshal([]byte(metadata), md); err != nil {
			return nil, Usagef("--metadata: want a JSON object: %v", err)
		}
	}
	log, err := workloadLogger(logLevel)
	if err != nil {
		return nil, err
	}
	return log, checkXDSCred(cred, log)
}

// serveStats serves a workload's HTTP handler (stats, readiness) on listen in the background
// and returns the address it listens on and how to stop it.
func serveStats(listen string, h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", nil, fmt.Errorf("listen %s: %w", listen, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return ln.Addr().String(), func() { srv.Close() }, nil
}

// checkXDSCred refuses flag combinations that cannot work. TLS without a token is allowed, with
// a warning: istiod and the reference control plane refuse such a stream, which is what a test
// of that refusal needs.
func checkXDSCred(o xdscred.Options, log *slog.Logger) error {
	if o.TokenFile != "" && o.RootCertFile == "" {
		return Usagef("--xds-token needs --xds-root-cert: a token is never sent in plaintext")
	}
	if o.ServerName != "" && o.RootCertFile == "" {
		return Usagef("--xds-server-name needs --xds-root-cert: it names the TLS server")
	}
	if o.RootCertFile != "" && o.TokenFile == "" {
		log.Warn("xDS over TLS without a token (--xds-token): istiod and the reference control plane refuse such streams", "root", o.RootCertFile)
	}
	return nil
}

func newXDSProxyCmd() *cobra.Command {
	var o xdsproxy.Options
	var metadata, logLevel string
	cmd := &cobra.Command{
		Use:   "xdsproxy",
		Short: "Sidecar/gateway HTTP proxy configured over xDS with Envoy's semantics (the local substrate's Envoy)",
		Long: `xdsproxy connects to an ADS server (state of the world, or delta with --delta), serves the
listeners it is given (HTTP/1.1 → route → cluster → endpoint), answers its own errors as Envoy does
(404 NR, 503 NC/UH/UF, with the flag in the x-meshchaos-response-flags header) and serves Envoy's
admin /ready, /config_dump and /stats on --admin.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.XDSAddress == "" || o.NodeID == "" {
				return Usagef("xdsproxy needs --xds HOST:PORT and --node-id ID")
			}
			if _, _, err := net.SplitHostPort(o.XDSAddress); err != nil {
				return Usagef("--xds %q: want HOST:PORT", o.XDSAddress)
			}
			log, err := xdsClientSetup(metadata, &o.Metadata, logLevel, o.Credentials)
			if err != nil {
				return err
			}
			o.Logger = log
			p, err := xdsproxy.New(o)
			if err != nil {
				return Usagef("%v", err)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			log.Info("xdsproxy starting", "xds", o.XDSAddress, "tls", o.Credentials.Secure(), "token", o.Credentials.HasToken(),
				"node", o.NodeID, "delta", o.Delta, "admin", o.AdminAddress)
			return p.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.XDSAddress, "xds", os.Getenv("XDS_ADDRESS"), "ADS server HOST:PORT (env XDS_ADDRESS)")
	f.StringVar(&o.NodeID, "node-id", os.Getenv("NODE_ID"), "node id, e.g. sidecar~$(POD_IP)~$(POD_NAME).$(POD_NAMESPACE)~$(POD_NAMESPACE).svc.cluster.local (env NODE_ID)")
	addXDSCredFlags(f, &o.Credentials)
	f.StringVar(&o.Cluster, "cluster", "", "node cluster (Envoy --service-cluster)")
	f.StringVar(&metadata, "metadata", "", "node metadata as a JSON object")
	f.BoolVar(&o.Delta, "delta", false, "use the delta (incremental) ADS protocol instead of state of the world")
	f.StringVar(&o.AdminAddress, "admin", "127.0.0.1:15000", "admin listen address (/ready, /config_dump, /stats); in a pod the manifest gives :PORT")
	f.StringVar(&o.ListenerIP, "listener-ip", "", "bind every listener on this IP instead of the one in its address (the port stays)")
	f.DurationVar(&o.InitialFetchTimeout, "initial-fetch-timeout", 0, "give up waiting for the first CDS/LDS after this long (0: wait forever, as Istio)")
	f.DurationVar(&o.BackoffBase, "backoff-base", 500*time.Millisecond, "reconnect backoff base")
	f.DurationVar(&o.BackoffMax, "backoff-max", 30*time.Second, "reconnect backoff ceiling")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.AddCommand(newXDSProxyWaitCmd())
	return cmd
}

func newXDSProxyWaitCmd() *cobra.Command {
	var admin string
	var timeout, interval time.Duration
	cmd := &cobra.Command{
		Use:   "wait",
		Short: "Exit 0 once the local proxy is ready (/ready is 200), 1 at --timeout: a postStart hook that holds the app",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 || interval <= 0 {
				return Usagef("--timeout and --interval must be positive")
			}
			if err := xdsproxy.Wait(cmd.Context(), admin, timeout, interval); err != nil {
				return WithExitCode(1, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&admin, "admin", "127.0.0.1:15000", "the proxy's admin address")
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "give up after this long (exit 1)")
	cmd.Flags().DurationVar(&interval, "interval", 100*time.Millisecond, "poll interval")
	return cmd
}

func newStartupAppCmd() *cobra.Command {
	var o startupapp.Options
	cmd := &cobra.Command{
		Use:   "startup-app",
		Short: "App that calls a dependency through its sidecar at start and exits non-zero if that fails",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Target == "" {
				return Usagef("startup-app needs --target URL (the dependency through the sidecar, e.g. http://127.0.0.1:15001/)")
			}
			if o.Attempts < 1 {
				return Usagef("--attempts must be at least 1")
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if err := startupapp.Run(ctx, o); err != nil {
				return WithExitCode(1, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Target, "target", os.Getenv("STARTUP_TARGET"), "URL called at start (env STARTUP_TARGET)")
	f.StringVar(&o.Host, "host", os.Getenv("STARTUP_HOST"), "Host header of that call: the dependency's name (env STARTUP_HOST)")
	f.IntVar(&o.Attempts, "attempts", 1, "calls before giving up")
	f.DurationVar(&o.Interval, "interval", time.Second, "pause between attempts")
	f.DurationVar(&o.MaxInterval, "max-interval", 0, "when above --interval, the pause doubles after each failed attempt up to this (exponential backoff)")
	f.DurationVar(&o.Timeout, "timeout", 2*time.Second, "timeout of each call")
	f.StringVar(&o.Addr, "addr", "127.0.0.1:8080", "listen address once started; in a pod the manifest gives :PORT")
	f.StringVar(&o.TerminationLog, "termination-log", "", "write the attempts report here on failure (in a pod: /dev/termination-log)")
	return cmd
}

func newADSLoadCmd() *cobra.Command {
	var o adsload.Options
	var listen, logLevel, abuse string
	var period time.Duration
	cmd := &cobra.Command{
		Use:   "adsload",
		Short: "Run N Envoy-like ADS clients (distinct node ids) that ACK and record convergence; totals on /stats and /metrics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.XDSAddress == "" {
				return Usagef("adsload needs --xds HOST:PORT")
			}
			if o.Clients < 1 {
				return Usagef("--clients must be at least 1")
			}
			log, err := xdsClientSetup("", nil, logLevel, o.Credentials)
			if err != nil {
				return err
			}
			o.Logger = log
			if abuse != "" {
				a := adsload.AbuseOptions{XDSAddress: o.XDSAddress, Credentials: o.Credentials, Mode: abuse, Clients: o.Clients,
					Period: period, Logger: log}
				if cmd.Flags().Changed("namespace") {
					a.Namespace = o.Namespace // the abusers' own default ("abuse") otherwise
				}
				return runAbuser(cmd, a)
			}
			l, err := adsload.New(o)
			if err != nil {
				return Usagef("%v", err)
			}
			addr, stopServing, err := serveStats(listen, l.Handler())
			if err != nil {
				return fmt.Errorf("adsload: %w", err)
			}
			defer stopServing()
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			log.Info("adsload starting", "xds", o.XDSAddress, "tls", o.Credentials.Secure(), "token", o.Credentials.HasToken(),
				"clients", o.Clients, "stats", addr)
			if err := l.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.XDSAddress, "xds", os.Getenv("XDS_ADDRESS"), "ADS server HOST:PORT (env XDS_ADDRESS)")
	addXDSCredFlags(f, &o.Credentials)
	f.IntVar(&o.Clients, "clients", 100, "number of ADS clients")
	f.IntVar(&o.First, "first-client", 0, "index of the first client in the node ids (clients first-client … first-client+clients-1): distinct proxies from several adsload processes")
	f.StringVar(&o.Namespace, "namespace", "adsload", "namespace used in the clients' Istio-style node ids (with --xds-token: the token's; --abuse: default abuse)")
	f.DurationVar(&o.Ramp, "ramp", 0, "pause between starting two clients")
	f.StringVar(&o.Track, "track", "", "record, per client, when each endpoint-count change of the clusters whose name contains this arrived (JSON on /tracked)")
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "HTTP address for /stats (JSON) and /metrics (Prometheus); in a pod the manifest gives :PORT")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&abuse, "abuse", "", "misbehave instead, to test a control plane: "+strings.Join(adsload.AbuseModes, ", ")+" (see adsload.Abuse*); prints the counts as JSON at the end")
	f.DurationVar(&period, "abuse-period", 5*time.Second, "how often a slow consumer (--abuse slow) reopens its stream")
	return cmd
}

func newGRPCClientCmd() *cobra.Command {
	var o grpcclient.Options
	var listen, logLevel, metadata string
	cmd := &cobra.Command{
		Use:   "grpc-xds-client",
		Short: "Run proxyless gRPC clients (grpc-go's xds:/// resolver and balancers) making health RPCs at a fixed rate; counts on /stats",
		Long: `grpc-xds-client is grpc-go as a data plane: --clients xDS clients, each with its own bootstrap
(node id --node-id with %d the client's index, metadata GENERATOR=grpc as istiod's proxyless mode
expects) and one xds:///HOST:PORT channel per --target, make grpc.health.v1 Check RPCs, --rate
per second in all. /stats serves, as JSON, the RPCs per second (OK and failed by status code) and
each channel's spans without a usable config; /ready is 200 once every channel has succeeded.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.XDSAddress == "" || len(o.Targets) == 0 {
				return Usagef("grpc-xds-client needs --xds HOST:PORT and at least one --target HOST:PORT")
			}
			if o.Clients < 1 || o.Rate <= 0 {
				return Usagef("--clients must be at least 1 and --rate more than 0")
			}
			log, err := xdsClientSetup(metadata, &o.Metadata, logLevel, o.Credentials)
			if err != nil {
				return err
			}
			o.Logger = log
			c, err := grpcclient.New(o)
			if err != nil {
				return Usagef("%v", err)
			}
			addr, stopServing, err := serveStats(listen, c.Handler())
			if err != nil {
				c.Close()
				return fmt.Errorf("grpc-xds-client: %w", err)
			}
			defer stopServing()
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			log.Info("grpc-xds-client starting", "xds", o.XDSAddress, "tls", o.Credentials.Secure(), "token", o.Credentials.HasToken(),
				"clients", o.Clients, "targets", o.Targets, "rate", o.Rate, "stats", addr)
			if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.XDSAddress, "xds", os.Getenv("XDS_ADDRESS"), "ADS server HOST:PORT (env XDS_ADDRESS)")
	addXDSCredFlags(f, &o.Credentials)
	f.StringVar(&o.NodeID, "node-id", "", "node id; %d is the client's index (default sidecar~127.0.0.1~grpc-client-%d.default~default.svc.cluster.local)")
	f.StringVar(&metadata, "metadata", "", "node metadata as a JSON object (GENERATOR=grpc is added)")
	f.StringArrayVar(&o.Targets, "target", nil, "HOST:PORT dialled as xds:///HOST:PORT by every client (repeat for more)")
	f.IntVar(&o.Clients, "clients", 1, "number of xDS clients, each with its own ADS stream")
	f.Float64Var(&o.Rate, "rate", 10, "RPCs per second in all, spread over the channels")
	f.DurationVar(&o.Timeout, "timeout", time.Second, "deadline of each RPC")
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "HTTP address for /stats and /ready; in a pod the manifest gives :PORT")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// runAbuser runs misbehaving ADS clients until interrupted and prints their counts.
func runAbuser(cmd *cobra.Command, o adsload.AbuseOptions) error {
	a, err := adsload.NewAbuser(o)
	if err != nil {
		return Usagef("%v", err)
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	o.Logger.Info("adsload abusing", "xds", o.XDSAddress, "mode", o.Mode, "clients", o.Clients)
	if err := a.Run(ctx); err != nil {
		return err
	}
	b, err := json.Marshal(a.Stats())
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), string(b))
	return nil
}
