// Command memgov-runtime drives kagent's Go agent runtime memory code (go/adk) from a test.
//
// It is built inside kagent's module tree (go/adk/cmd/memgov-runtime) and wires what kagent's Go
// runtime wires for a memory-enabled agent: the token-service HTTP client (X-Agent-Name,
// X-User-Id from the request context, the mounted token), KagentMemoryService with an
// OpenAI-provider embedding config, and an ADK LLM agent with the preload_memory, load_memory and
// kagent's save_memory tools. The model is scripted: "remember: X" calls save_memory; every other
// turn answers with what the preload tool put into the instructions.
//
// Protocol: a JSON config on the first stdin line, then one JSON op per line, one JSON answer per
// stdout line (ops: turn, search, add_session).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"os"
	"strings"

	"google.golang.org/adk/agent"
	"google.golang.org/adk/agent/llmagent"
	adkmemory "google.golang.org/adk/memory"
	"google.golang.org/adk/model"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/adk/tool"
	"google.golang.org/adk/tool/loadmemorytool"
	"google.golang.org/adk/tool/preloadmemorytool"
	"google.golang.org/genai"

	"github.com/kagent-dev/kagent/go/adk/pkg/auth"
	kagentmemory "github.com/kagent-dev/kagent/go/adk/pkg/memory"
	"github.com/kagent-dev/kagent/go/api/adk"
)

type config struct {
	KagentURL    string `json:"kagent_url"`
	EmbeddingURL string `json:"embedding_url"`
	AppName      string `json:"app_name"`
	Agent        string `json:"agent"`
	UserID       string `json:"user_id"`
	// Token stands for the projected service-account token kagent's runtime reads from a fixed
	// path (/var/run/secrets/tokens/kagent-token) that a test cannot mount.
	Token string `json:"token"`
}

type op struct {
	Op      string `json:"op"`
	Session string `json:"session"`
	Text    string `json:"text"`
	Query   string `json:"query"`
}

// mountedToken adds the bearer a mounted token file would give kagent's token service.
type mountedToken struct {
	next  http.RoundTripper
	token string
}

func (m mountedToken) RoundTrip(req *http.Request) (*http.Response, error) {
	if m.token != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+m.token)
	}
	return m.next.RoundTrip(req)
}

// scripted stands where the model would.
type scripted struct{}

func (scripted) Name() string { return "scripted" }

func (scripted) GenerateContent(_ context.Context, req *model.LLMRequest, _ bool) iter.Seq2[*model.LLMResponse, error] {
	return func(yield func(*model.LLMResponse, error) bool) {
		last := req.Contents[len(req.Contents)-1]
		var text strings.Builder
		for _, p := range last.Parts {
			if p.FunctionResponse != nil {
				out, _ := json.Marshal(p.FunctionResponse.Response)
				yield(reply("tool said: "+string(out)), nil)
				return
			}
			text.WriteString(p.Text)
		}
		if rest, ok := strings.CutPrefix(text.String(), "remember:"); ok {
			call := &genai.Part{FunctionCall: &genai.FunctionCall{Name: "save_memory",
				Args: map[string]any{"content": strings.TrimSpace(rest)}}}
			yield(&model.LLMResponse{Content: &genai.Content{Role: "model", Parts: []*genai.Part{call}}}, nil)
			return
		}
		instruction := ""
		if req.Config != nil && req.Config.SystemInstruction != nil {
			for _, p := range req.Config.SystemInstruction.Parts {
				instruction += p.Text
			}
		}
		yield(reply("recalled: "+instruction), nil)
	}
}

func reply(text string) *model.LLMResponse {
	return &model.LLMResponse{Content: genai.NewContentFromText(text, "model")}
}

type driver struct {
	cfg      config
	memory   *kagentmemory.KagentMemoryService
	sessions session.Service
	runner   *runner.Runner
}

func newDriver(cfg config) (*driver, error) {
	tokens := auth.NewKAgentTokenService(cfg.AppName)
	client := auth.NewHTTPClientWithToken(tokens)
	client.Transport = mountedToken{next: client.Transport, token: cfg.Token}
	memory, err := kagentmemory.New(kagentmemory.Config{
		AgentName:  cfg.AppName,
		APIURL:     cfg.KagentURL,
		HTTPClient: client,
		EmbeddingConfig: &adk.EmbeddingConfig{
			Provider: "openai", Model: "text-embedding-3-small", BaseUrl: cfg.EmbeddingURL,
		},
	})
	if err != nil {
		return nil, err
	}
	save, err := kagentmemory.NewSaveMemoryTool(memory)
	if err != nil {
		return nil, err
	}
	// The tools kagent's Go runtime gives an agent with memory (go/adk/pkg/agent buildAgentTools).
	llm, err := llmagent.New(llmagent.Config{
		Name: cfg.Agent, Model: scripted{}, Instruction: "You are a test agent.",
		Tools: []tool.Tool{preloadmemorytool.New(), loadmemorytool.New(), save},
	})
	if err != nil {
		return nil, err
	}
	sessions := session.InMemoryService()
	r, err := runner.New(runner.Config{AppName: cfg.AppName, Agent: llm, SessionService: sessions, MemoryService: memory})
	if err != nil {
		return nil, err
	}
	return &driver{cfg: cfg, memory: memory, sessions: sessions, runner: r}, nil
}

func (d *driver) session(ctx context.Context, id string) (session.Session, error) {
	got, err := d.sessions.Get(ctx, &session.GetRequest{AppName: d.cfg.AppName, UserID: d.cfg.UserID, SessionID: id})
	if err == nil {
		return got.Session, nil
	}
	created, err := d.sessions.Create(ctx, &session.CreateRequest{AppName: d.cfg.AppName, UserID: d.cfg.UserID, SessionID: id})
	if err != nil {
		return nil, err
	}
	return created.Session, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (d *driver) run(ctx context.Context, o op) map[string]any {
	switch o.Op {
	case "turn":
		if _, err := d.session(ctx, o.Session); err != nil {
			return map[string]any{"error": errText(err)}
		}
		var replies, failures []string
		for event, err := range d.runner.Run(ctx, d.cfg.UserID, o.Session, genai.NewContentFromText(o.Text, "user"), agent.RunConfig{}) {
			if err != nil {
				failures = append(failures, err.Error())
				continue
			}
			if event.Content != nil {
				for _, p := range event.Content.Parts {
					if p.Text != "" {
						replies = append(replies, p.Text)
					}
				}
			}
		}
		return map[string]any{"replies": replies, "errors": failures}
	case "search":
		found, err := d.memory.SearchMemory(ctx, &adkmemory.SearchRequest{Query: o.Query, UserID: d.cfg.UserID, AppName: d.cfg.AppName})
		texts := []string{}
		if found != nil {
			for _, m := range found.Memories {
				for _, p := range m.Content.Parts {
					texts = append(texts, p.Text)
				}
			}
		}
		return map[string]any{"memories": texts, "error": errText(err)}
	case "add_session":
		s, err := d.session(ctx, o.Session)
		if err == nil {
			err = d.memory.AddSessionToMemory(ctx, s)
		}
		return map[string]any{"error": errText(err)}
	}
	return map[string]any{"error": "unknown op " + o.Op}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	var cfg config
	if !in.Scan() || json.Unmarshal(in.Bytes(), &cfg) != nil {
		fmt.Fprintln(os.Stderr, "memgov-runtime: expected a JSON config line")
		os.Exit(2)
	}
	d, err := newDriver(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "memgov-runtime:", err)
		os.Exit(1)
	}
	// What kagent's A2A executor does with the request's X-User-Id.
	ctx := auth.WithUserID(context.Background(), cfg.UserID)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var o op
		if err := json.Unmarshal(in.Bytes(), &o); err != nil {
			_ = out.Encode(map[string]any{"error": "bad op"})
			continue
		}
		_ = out.Encode(d.run(ctx, o))
	}
}
