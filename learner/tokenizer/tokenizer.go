package tokenizer

// Tokenizer turns text into token ids and back. *HF implements it, for
// tokenizer.json vocabularies and the built-in one alike.
type Tokenizer interface {
	// Encode encodes text with special parsing off: added and special
	// tokens written in the text are encoded as ordinary text, so the
	// result never holds an added-token id. Use it for every text that
	// comes from outside (prompt files, collaborator answers).
	Encode(text string) []int
	// EncodeSpecial encodes text with special parsing on: added tokens
	// written in the text ("<|im_end|>") become their ids.
	EncodeSpecial(text string) []int
	// Decode turns ids back into text; skipSpecial drops special tokens.
	// The result is the decoded bytes as they are (a sequence cut inside a
	// UTF-8 character stays cut). An unknown id is an error.
	Decode(ids []int, skipSpecial bool) (string, error)
	// ApplyChat renders messages in the vocabulary's chat format, with the
	// opening of an assistant turn at the end when addGenerationPrompt.
	ApplyChat(messages []Message, addGenerationPrompt bool) ([]int, error)
	// StopIDs lists the ids that end an assistant turn in the chat format.
	StopIDs() []int

	VocabSize() int
	TokenString(id int) (string, bool)
	TokenBytes(id int) []byte
	ID(token string) (int, bool)
	IsSpecial(id int) bool
	BOS() int
	EOS() int
	PAD() int
}

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"` // "system", "user", "assistant" or "tool"
	Content string `json:"content"`
}
