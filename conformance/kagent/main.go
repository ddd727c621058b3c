// Command memgov-conformance serves kagent's own controller HTTP API without Kubernetes.
//
// It is built inside kagent's unpacked module tree (go/core/cmd/memgov-conformance), so it may
// import kagent's internal packages, and it wires them the way go/core/pkg/app does: migrations,
// the pgx pool and DB client, the gorilla router with kagent's middleware and handlers, the
// DB cleanup loop, and the A2A proxy. Only the Kubernetes side is replaced: a fake
// controller-runtime client (no CRDs, no objects) and agents registered from flags instead of
// from Agent resources (in the A2A registry and in the agent table, as kagent's reconciler
// records them). Nothing here changes how a request is handled.
//
// One source serves kagent v0.9.11 and v0.10.0-rc3: the three calls whose signatures differ
// between them live in kagent_v0_9.go and kagent_v0_10.go, picked by the kagent_v0_10 build tag.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	a2atype "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/gorilla/mux"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	dbpkg "github.com/kagent-dev/kagent/go/api/database"
	"github.com/kagent-dev/kagent/go/api/v1alpha2"
	"github.com/kagent-dev/kagent/go/core/internal/a2a"
	"github.com/kagent-dev/kagent/go/core/internal/database"
	"github.com/kagent-dev/kagent/go/core/internal/httpserver"
	authimpl "github.com/kagent-dev/kagent/go/core/internal/httpserver/auth"
	"github.com/kagent-dev/kagent/go/core/pkg/auth"
)

// agentFlags collects repeated --a2a-agent namespace/name=URL values.
type agentFlags map[string]string

func (a agentFlags) String() string { return fmt.Sprint(map[string]string(a)) }

func (a agentFlags) Set(raw string) error {
	ref, url, ok := strings.Cut(raw, "=")
	ns, name, okRef := strings.Cut(ref, "/")
	if !ok || !okRef || ns == "" || name == "" || url == "" {
		return fmt.Errorf("expected namespace/name=URL, got %q", raw)
	}
	a[ref] = url
	return nil
}

type options struct {
	addr          string
	adminAddr     string
	dbURL         string
	vector        bool
	authMode      string
	userIDClaim   string
	cleanup       time.Duration
	agents        agentFlags
	zapOptions    zap.Options
}

func parseFlags() *options {
	o := &options{agents: agentFlags{}}
	flag.StringVar(&o.addr, "http-server-address", "127.0.0.1:8083", "kagent's --http-server-address.")
	flag.StringVar(&o.adminAddr, "admin-address", "", "Optional test listener: POST /prune runs kagent's PruneExpiredMemories now.")
	flag.StringVar(&o.dbURL, "postgres-database-url", "", "kagent's --postgres-database-url.")
	flag.BoolVar(&o.vector, "database-vector-enabled", true, "kagent's --database-vector-enabled.")
	flag.StringVar(&o.authMode, "auth-mode", "unsecure", "kagent's --auth-mode: unsecure or trusted-proxy.")
	flag.StringVar(&o.userIDClaim, "auth-user-id-claim", "sub", "kagent's --auth-user-id-claim.")
	flag.DurationVar(&o.cleanup, "cleanup-interval", 24*time.Hour, "Interval of kagent's cleanup loop (24h in kagent).")
	flag.Var(o.agents, "a2a-agent", "Register an agent as namespace/name=URL of its A2A endpoint (repeatable).")
	o.zapOptions.BindFlags(flag.CommandLine)
	flag.Parse()
	return o
}

// authenticator picks kagent's authenticator exactly as go/core/cmd/controller does.
func authenticator(mode, claim string) (auth.AuthProvider, error) {
	switch mode {
	case "trusted-proxy":
		return authimpl.NewProxyAuthenticator(claim), nil
	case "unsecure":
		return &authimpl.UnsecureAuthenticator{}, nil
	}
	return nil, fmt.Errorf("unknown auth mode %q (valid modes: unsecure, trusted-proxy)", mode)
}

// registerAgent does what kagent's A2A registrar does for one Agent resource: a card from
// kagent's translator, a client speaking the legacy (0.3) JSON-RPC wire to the agent, and
// kagent's upstream-auth interceptor, which forwards the caller's user id to the agent.
func registerAgent(ctx context.Context, muxer a2a.A2AHandlerMux, authn auth.AuthProvider, ref, url string) error {
	ns, name, _ := strings.Cut(ref, "/")
	card := a2atype.AgentCard{
		Name: strings.ReplaceAll(name, "-", "_"),
		SupportedInterfaces: []*a2atype.AgentInterface{{
			URL: url, ProtocolBinding: a2atype.TransportProtocolJSONRPC, ProtocolVersion: a2atype.ProtocolVersion("0.3"),
		}},
		Capabilities:       a2atype.AgentCapabilities{Streaming: true},
		Skills:             []a2atype.AgentSkill{},
		DefaultInputModes:  []string{"text"},
		DefaultOutputModes: []string{"text"},
	}
	client, err := a2aclient.NewFromEndpoints(ctx, card.SupportedInterfaces,
		a2aclient.WithCompatTransport(a2atype.ProtocolVersion("0.3"), a2atype.TransportProtocolJSONRPC,
			a2aclient.TransportFactoryFn(func(_ context.Context, _ *a2atype.AgentCard, iface *a2atype.AgentInterface) (a2aclient.Transport, error) {
				return a2av0.NewJSONRPCTransport(a2av0.JSONRPCTransportConfig{URL: iface.URL}), nil
			})),
		a2aclient.WithCallInterceptors(a2a.NewUpstreamAuthInterceptor(authn, types.NamespacedName{Namespace: ns, Name: name})),
	)
	if err != nil {
		return fmt.Errorf("A2A client for %s: %w", ref, err)
	}
	return muxer.SetAgentHandler(ref, client, card, nil)
}

// recordAgent writes the agent's row the way kagent's reconciler does for a declarative Agent
// (id in Python-identifier form), so session routes find it.
func recordAgent(ctx context.Context, db dbpkg.Client, ref string) error {
	id := strings.ReplaceAll(strings.ReplaceAll(ref, "-", "_"), "/", "__NS__")
	agent := &dbpkg.Agent{ID: id, Type: string(v1alpha2.AgentType_Declarative), WorkloadType: v1alpha2.WorkloadModeDeployment}
	if err := db.StoreAgent(ctx, agent); err != nil {
		return fmt.Errorf("agent row for %s: %w", ref, err)
	}
	return nil
}

// serveAdmin answers POST /prune with kagent's own prune (the cleanup loop's body), so tests
// need not wait for the loop.
func serveAdmin(ctx context.Context, addr string, db dbpkg.Client) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	m := http.NewServeMux()
	m.HandleFunc("POST /prune", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := db.PruneExpiredMemories(r.Context()); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "failed"})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "pruned"})
	})
	srv := &http.Server{Handler: m, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

func run(o *options) error {
	ctx := ctrl.SetupSignalHandler()
	logger := zap.New(zap.UseFlagOptions(&o.zapOptions))
	ctrl.SetLogger(logger)
	log := logger.WithName("memgov-conformance")
	ctx = ctrllog.IntoContext(ctx, logger)

	authn, err := authenticator(o.authMode, o.userIDClaim)
	if err != nil {
		return err
	}
	if err := runMigrations(ctx, o.dbURL, o.vector); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	pool, err := database.Connect(ctx, &database.PostgresConfig{URL: o.dbURL, VectorEnabled: o.vector})
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	db := database.NewClient(pool)

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha2.AddToScheme(scheme))
	kube := fake.NewClientBuilder().WithScheme(scheme).Build()

	a2aMux := newA2AMux(authn, db)
	for ref, url := range o.agents {
		if err := registerAgent(ctx, a2aMux, authn, ref, url); err != nil {
			return err
		}
		if err := recordAgent(ctx, db, ref); err != nil {
			return err
		}
	}
	server, err := httpserver.NewHTTPServer(httpserver.ServerConfig{
		Router:        mux.NewRouter(),
		BindAddr:      o.addr,
		KubeClient:    kube,
		A2AHandler:    a2aMux,
		DbClient:      db,
		Authorizer:    &authimpl.NoopAuthorizer{},
		Authenticator: authn,
	})
	if err != nil {
		return err
	}
	if err := server.Start(ctx); err != nil {
		return err
	}
	if o.adminAddr != "" {
		if err := serveAdmin(ctx, o.adminAddr, db); err != nil {
			return err
		}
	}
	log.Info("serving kagent's controller HTTP API", "address", o.addr, "authMode", o.authMode,
		"vectorEnabled", o.vector, "cleanupInterval", o.cleanup.String())
	return cleanupLoop(db, o.cleanup).Start(ctx)
}

func main() {
	if err := run(parseFlags()); err != nil {
		fmt.Fprintln(os.Stderr, "memgov-conformance:", err)
		os.Exit(1)
	}
}
