package tokenizer

import (
	"fmt"
	"strings"
)

// chatFormat is the chat template of a vocabulary, found from its markers.
type chatFormat struct {
	kind  chatKind
	start int // <|im_start|> or <|start_header_id|>
	end   int // <|im_end|> or <|eot_id|>
	head  int // <|end_header_id|> (Llama 3)
	// Qwen3's <think> and </think>; -1 when the vocabulary has none.
	think, thinkEnd int
	stops           []int
}

type chatKind int

const (
	chatNone   chatKind = iota
	chatML              // Qwen, the built-in vocabulary
	chatLlama3          // Llama 3
)

func detectChat(t *HF) chatFormat {
	id := func(s string) int {
		if v, ok := t.added[s]; ok {
			return v
		}
		return -1
	}
	f := chatFormat{think: id("<think>"), thinkEnd: id("</think>")}
	addStop := func(ids ...int) {
		for _, v := range ids {
			if v < 0 {
				continue
			}
			dup := false
			for _, s := range f.stops {
				dup = dup || s == v
			}
			if !dup {
				f.stops = append(f.stops, v)
			}
		}
	}
	switch {
	case id("<|im_start|>") >= 0 && id("<|im_end|>") >= 0:
		f.kind, f.start, f.end = chatML, id("<|im_start|>"), id("<|im_end|>")
		addStop(f.end, id("<|endoftext|>"), t.eos)
	case id("<|start_header_id|>") >= 0 && id("<|end_header_id|>") >= 0 && id("<|eot_id|>") >= 0:
		f.kind, f.start, f.head, f.end = chatLlama3, id("<|start_header_id|>"), id("<|end_header_id|>"), id("<|eot_id|>")
		addStop(f.end, id("<|eom_id|>"), t.eos)
	default:
		addStop(t.eos)
	}
	return f
}

// ChatOptions are the switches of ApplyChatWith.
type ChatOptions struct {
	// AddGenerationPrompt ends the sequence with the opening of an
	// assistant turn.
	AddGenerationPrompt bool
	// DisableThinking adds Qwen3's empty "<think>\n\n</think>\n\n" after
	// the generation prompt (its template's enable_thinking=false). It is
	// an error for a vocabulary without <think> tokens.
	DisableThinking bool
}

// StopIDs lists the ids that end an assistant turn: <|im_end|> (and
// <|endoftext|>) for ChatML, <|eot_id|> (and <|eom_id|>) for Llama 3, and
// EOS in every case.
func (t *HF) StopIDs() []int { return append([]int(nil), t.chat.stops...) }

// ApplyChat renders messages to token ids in the vocabulary's chat format;
// see ApplyChatWith.
func (t *HF) ApplyChat(messages []Message, addGenerationPrompt bool) ([]int, error) {
	return t.ApplyChatWith(messages, ChatOptions{AddGenerationPrompt: addGenerationPrompt})
}

// ApplyChatWith renders messages to token ids. The template's markers are
// special tokens; everything else (roles, content, the template's newlines)
// is encoded with special parsing off, one stretch between two markers at a
// time, which gives the ids Hugging Face gets by encoding the rendered
// template text (except that a marker written inside a message stays text).
//
// ChatML (Qwen, built-in): "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per
// message and "<|im_start|>assistant\n" as the generation prompt. With
// Qwen3's vocabulary the assistant turns follow Qwen3's template: reasoning
// between <think> and </think> is dropped from turns before the last user
// message, and turns after it carry a <think> block.
//
// Llama 3: "<|begin_of_text|>" then "<|start_header_id|>ROLE<|end_header_id|>\n\n
// CONTENT<|eot_id|>" per message, content trimmed of surrounding white space.
func (t *HF) ApplyChatWith(messages []Message, opt ChatOptions) ([]int, error) {
	for i, m := range messages {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return nil, fmt.Errorf("tokenizer: chat message %d has role %q: want system, user or assistant", i, m.Role)
		}
	}
	f := &t.chat
	if opt.DisableThinking && (f.kind != chatML || f.think < 0 || f.thinkEnd < 0) {
		return nil, fmt.Errorf("tokenizer: DisableThinking needs a ChatML vocabulary with <think> and </think> tokens (Qwen3)")
	}
	var out []int
	switch f.kind {
	case chatML:
		out = t.chatML(messages, opt)
	case chatLlama3:
		if t.bos >= 0 {
			out = append(out, t.bos)
		}
		for _, m := range messages {
			out = append(out, f.start)
			out = t.encodeText(out, m.Role)
			out = append(out, f.head)
			out = t.encodeText(out, "\n\n"+strings.TrimSpace(m.Content))
			out = append(out, f.end)
		}
		if opt.AddGenerationPrompt {
			out = append(out, f.start)
			out = t.encodeText(out, "assistant")
			out = append(out, f.head)
			out = t.encodeText(out, "\n\n")
		}
	default:
		return nil, fmt.Errorf("tokenizer: the vocabulary has neither ChatML markers (<|im_start|>, <|im_end|>) nor Llama 3 headers (<|start_header_id|>, <|end_header_id|>, <|eot_id|>): no chat format is known for it")
	}
	return out, nil
}

func (t *HF) chatML(messages []Message, opt ChatOptions) []int {
	f := &t.chat
	qwen3 := f.think >= 0 && f.thinkEnd >= 0
	// Qwen3: the last user message that is not a tool response.
	lastQuery := len(messages) - 1
	for i := len(messages) - 1; i >= 0; i-- {
		c := messages[i].Content
		if messages[i].Role == "user" && !(strings.HasPrefix(c, "<tool_response>") && strings.HasSuffix(c, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	var out []int
	for i, m := range messages {
		out = append(out, f.start)
		if m.Role != "assistant" || !qwen3 {
			out = t.encodeText(out, m.Role+"\n"+m.Content)
		} else {
			content, reasoning := m.Content, ""
			if before, _, ok := strings.Cut(m.Content, "</think>"); ok {
				content = strings.TrimLeft(m.Content[strings.LastIndex(m.Content, "</think>")+len("</think>"):], "\n")
				before = strings.TrimRight(before, "\n")
				if j := strings.LastIndex(before, "<think>"); j >= 0 {
					before = before[j+len("<think>"):]
				}
				reasoning = strings.TrimLeft(before, "\n")
			}
			if i > lastQuery && (i == len(messages)-1 || reasoning != "") {
				out = t.encodeText(out, "assistant\n")
				out = append(out, f.think)
				out = t.encodeText(out, "\n"+strings.Trim(reasoning, "\n")+"\n")
				out = append(out, f.thinkEnd)
				out = t.encodeText(out, "\n\n"+strings.TrimLeft(content, "\n"))
			} else {
				out = t.encodeText(out, "assistant\n"+content)
			}
		}
		out = append(out, f.end)
		out = t.encodeText(out, "\n")
	}
	if opt.AddGenerationPrompt {
		out = append(out, f.start)
		out = t.encodeText(out, "assistant\n")
		if opt.DisableThinking {
			out = append(out, f.think)
			out = t.encodeText(out, "\n\n")
			out = append(out, f.thinkEnd)
			out = t.encodeText(out, "\n\n")
		}
	}
	return out
}
