// Package tokenizer turns text into token ids and back for the models the
// learner trains.
//
// It reads Hugging Face tokenizer.json files of the byte-level BPE kind
// (Qwen2/Qwen3, Llama 3, GPT-2 style): the normaliser (NFC, NFD, NFKC, NFKD
// or a sequence of them), the pre-tokenizer (Split on a regular expression
// with look-ahead, ByteLevel, Sequence), the BPE model with its ranked
// merges, added and special tokens, and the ByteLevel decoder.
//
// Text from outside the system (prompt files, collaborator answers) is
// encoded with Encode, which never matches added or special tokens: such
// text can not forge a chat-template marker. EncodeSpecial matches every
// added token in the text first, as Hugging Face's tokenizer does by default.
//
// ApplyChat renders a conversation in the chat format of the vocabulary
// (ChatML for Qwen and the built-in vocabulary, the header format of
// Llama 3) directly to token ids: the template's markers are special tokens,
// every message's content is encoded with special parsing off.
//
// Encoding adds no BOS or other post-processor tokens (llama.cpp's test
// vectors and the chat templates add them explicitly; BOS gives the id), and
// decoding returns the bytes of the tokens as they are, without Hugging Face
// transformers' clean_up_tokenization_spaces.
//
// The pre-tokenizer patterns of Qwen, Llama 3 and GPT-2 run on hand-written
// matchers that the tests check against the regular expression engine
// (github.com/dlclark/regexp2), which runs every other pattern.
//
// Builtin returns a small byte-level vocabulary for demonstration models;
// it is an ordinary tokenizer.json tokenizer and can be written next to a
// checkpoint with SaveDir, so that a demo checkpoint directory has the same
// layout as a Hugging Face one.
package tokenizer
