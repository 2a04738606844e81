//go:build shareddata

package httpclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aipo-rl/aipo/internal/shareddata"
	"github.com/aipo-rl/aipo/learner/tokenizer"
	"github.com/aipo-rl/aipo/schemas"
	"github.com/aipo-rl/aipo/transforms/collab"
	"github.com/aipo-rl/aipo/transforms/interact"
	"github.com/aipo-rl/aipo/transforms/policy"
	_ "github.com/aipo-rl/aipo/transforms/policy/httpclient"
)

// scriptServer answers /v1/completions like vLLM or SGLang over a real
// tokenizer: call k emits the ids of pieces[k] (special parsing on; EOS
// once they run out) and stops at the token whose text completes a stop
// string. Its answer has the text cut at the stop string (vLLM with
// include_stop_str_in_output keeps the stop string and drops the rest of
// the token's characters; without it, or SGLang, the stop string goes
// too) while the token ids hold the whole token, and names the stop string
// in stop_reason (vLLM, https://github.com/vllm-project/vllm/pull/2976) or
// matched_stop (SGLang), an EOS as stop_reason null or matched_stop <id>.
type scriptServer struct {
	tok    *tokenizer.HF
	sglang bool
	pieces []string

	mu    sync.Mutex
	calls int
}

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func toIDs(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

func (s *scriptServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req map[string]json.RawMessage
	if r.Method == http.MethodPost {
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	var out any
	switch r.URL.Path {
	case "/v1/models":
		owner := "vllm"
		if s.sglang {
			owner = "sglang"
		}
		out = map[string]any{"data": []any{map[string]any{"id": "m", "owned_by": owner, "max_model_len": 8192}}}
	case "/tokenize", "/v1/tokenize":
		var text string
		var special bool
		json.Unmarshal(req["prompt"], &text)
		json.Unmarshal(req["parse_special"], &special)
		ids := s.tok.Encode(text)
		if special {
			ids = s.tok.EncodeSpecial(text)
		}
		out = map[string]any{"tokens": ids}
	case "/detokenize", "/v1/detokenize":
		var ids []int
		json.Unmarshal(req["tokens"], &ids)
		text, err := s.tok.Decode(ids, false)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out = map[string]any{"prompt": text}
		if s.sglang {
			out = map[string]any{"text": text}
		}
	case "/v1/completions", "/generate":
		var stops []string
		var include bool
		json.Unmarshal(req["stop"], &stops)
		json.Unmarshal(req["include_stop_str_in_output"], &include)
		if r.URL.Path == "/generate" {
			var sp map[string]json.RawMessage
			json.Unmarshal(req["sampling_params"], &sp)
			json.Unmarshal(sp["stop"], &stops)
		}
		s.mu.Lock()
		k := s.calls
		s.calls++
		s.mu.Unlock()
		script := []int{s.tok.EOS()}
		if k < len(s.pieces) {
			script = s.tok.EncodeSpecial(s.pieces[k])
		}
		var ids []int
		var lps []float64
		var text string
		var reason any
		finish := "length"
		for _, id := range script {
			ids = append(ids, id)
			lps = append(lps, -0.25)
			if id == s.tok.EOS() {
				finish = "stop"
				if s.sglang {
					reason = id
				}
				break
			}
			text, _ = s.tok.Decode(ids, false)
			if st := firstStop(text, stops); st != "" {
				finish, reason = "stop", st
				cut := strings.Index(text, st)
				if include && !s.sglang {
					cut += len(st)
				}
				text = text[:cut]
				break
			}
		}
		if r.URL.Path == "/generate" {
			// SGLang's native answer: output_ids, and meta_info with the
			// finish reason and [logprob, id, null] per output token.
			lpe := make([]any, len(ids))
			for i, id := range ids {
				lpe[i] = []any{lps[i], id, nil}
			}
			fr := map[string]any{"type": finish, "matched": reason}
			if finish == "length" {
				fr = map[string]any{"type": "length", "length": len(ids)}
			}
			out = map[string]any{"text": text, "output_ids": ids, "meta_info": map[string]any{"id": "x", "finish_reason": fr,
				"prompt_tokens": 3, "completion_tokens": len(ids), "output_token_logprobs": lpe, "weight_version": "default"}}
			break
		}
		toks := make([]string, len(ids))
		for i, id := range ids {
			toks[i] = fmt.Sprintf("token_id:%d", id)
		}
		choice := map[string]any{"index": 0, "text": text, "finish_reason": finish,
			"logprobs": map[string]any{"tokens": toks, "token_logprobs": lps}}
		if s.sglang {
			choice["matched_stop"] = reason
			choice["token_ids"] = ids
		} else {
			choice["stop_reason"] = reason
		}
		out = map[string]any{"choices": []any{choice}}
	default:
		http.NotFound(w, r)
		return
	}
	json.NewEncoder(w).Encode(out)
}

func firstStop(text string, stops []string) string {
	for _, st := range stops {
		if strings.Contains(text, st) {
			return st
		}
	}
	return ""
}

// TestServerStopShapes runs the interaction protocol through the HTTP
// client against servers answering in vLLM's and SGLang's shapes on the
// Qwen3 and Llama 3 vocabularies: a closing tag completed inside a token
// (">\n", ">.", ">,", ">)") is a call; the token stays whole and the
// policy's, the answer follows it, and the response decodes to the
// policy's text and the answer block.
func TestServerStopShapes(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3"} {
		tok, err := tokenizer.Load(shareddata.Path(t, "tokenizers/"+name+"/tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		eos, _ := tok.TokenString(tok.EOS())
		for _, sglang := range []bool{false, true} {
			for _, opener := range []string{interact.OpenerSystem, interact.OpenerPolicy} {
				for _, cont := range []string{"\n", "\n\n", ".", ",", ")", ""} {
					stop := "</verify>"
					if opener == interact.OpenerPolicy {
						stop += interact.ResultOpen
					}
					piece := "Let me check <verify>2+2=4" + stop + cont + "So it is 4."
					t.Run(fmt.Sprintf("%s/sglang=%v/%s/%q", name, sglang, opener, piece), func(t *testing.T) {
						srv := &scriptServer{tok: tok, sglang: sglang, pieces: []string{piece, "So it is 4." + eos}}
						ts := httptest.NewServer(srv)
						defer ts.Close()
						ctx := context.Background()
						c, err := policy.Open(ctx, ts.URL+"/v1?model=m")
						if err != nil {
							t.Fatal(err)
						}
						defer c.Close()
						cfg := interact.Default()
						cfg.OpenerBy = opener
						agents := collab.Set{collab.Verify: collab.Func(func(context.Context, collab.Query) (collab.Answer, error) {
							return collab.Answer{Text: "correct", Status: schemas.StatusOK}, nil
						})}
						p, err := interact.New(ctx, c, agents, cfg)
						if err != nil {
							t.Fatal(err)
						}
						out, err := p.Run(ctx, interact.Task{Run: "r", PromptID: "p", Prompt: toIDs(tok.Encode("What is 2+2?"))})
						if err != nil || out.Err != nil {
							t.Fatalf("run: %v %v", err, out.Err)
						}
						tr := out.Trajectory
						if len(tr.InteractionAgent) != 1 || tr.InteractionQuery[0] != "2+2=4" {
							t.Fatalf("interactions %v %q, want one verify call with 2+2=4; response %q", tr.InteractionAgent, tr.InteractionQuery, tr.ResponseText)
						}
						// The policy's first turn: its tokens up to the one
						// completing the stop string, whole.
						script := toIDs(tok.EncodeSpecial(piece))
						n := 0
						for n = 1; n <= len(script); n++ {
							if text, _ := tok.Decode(toInts(script[:n]), false); strings.Contains(text, stop) {
								break
							}
						}
						block := interact.ResultOpen + "correct" + interact.ResultClose
						var want []int32
						want = append(want, script[:n]...)
						if opener == interact.OpenerSystem {
							want = append(want, toIDs(tok.EncodeSpecial(interact.ResultOpen))...)
						} else {
							block = "correct" + interact.ResultClose
						}
						want = append(want, toIDs(tok.Encode("correct"))...)
						want = append(want, toIDs(tok.EncodeSpecial(interact.ResultClose))...)
						spanEnd := len(want)
						want = append(want, toIDs(tok.EncodeSpecial("So it is 4."+eos))...)
						if !slices.Equal(tr.ResponseIDs, want) {
							t.Fatalf("response_ids\n got %v\nwant %v", tr.ResponseIDs, want)
						}
						if int(tr.InteractionSpanStart[0]) != n || int(tr.InteractionSpanEnd[0]) != spanEnd {
							t.Fatalf("span [%d,%d), want [%d,%d)", tr.InteractionSpanStart[0], tr.InteractionSpanEnd[0], n, spanEnd)
						}
						first, _ := tok.Decode(toInts(script[:n]), false)
						if got, _ := tok.Decode(toInts(tr.ResponseIDs), false); got != first+block+"So it is 4."+eos {
							t.Fatalf("response decodes to %q, want %q", got, first+block+"So it is 4."+eos)
						}
						for i, s := range tr.TokenSource {
							if (s == schemas.SourcePolicy) != (i < n || i >= spanEnd) {
								t.Fatalf("token %d has source %d; the span [%d,%d) holds exactly the inserted tokens", i, s, n, spanEnd)
							}
						}
					})
				}
			}
		}
	}
}
