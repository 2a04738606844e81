// Writes learner/tokenizer/testdata/hf_reference.json: token ids computed
// by Hugging Face's own tokenizer (npm "tokenizers", a Rust library) and chat
// templates rendered by Hugging Face's Jinja implementation (npm
// "@huggingface/jinja") from each vocabulary's tokenizer_config.json.
// The Go tests compare the package's output with these.
//
// Run through scripts/tokenizer-fixtures.sh, which installs both packages.
//   node tokenizer-fixtures.mjs SHARED_DATA_DIR BUILTIN_DIR OUT_FILE
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(process.cwd() + "/");
const { Tokenizer } = require("tokenizers");
const { Template } = await import(require.resolve("@huggingface/jinja"));

const [sharedDir, builtinDir, outFile] = process.argv.slice(2);
if (!outFile) {
  console.error("usage: node tokenizer-fixtures.mjs SHARED_DATA_DIR BUILTIN_DIR OUT_FILE");
  process.exit(2);
}

const vocabs = {
  qwen3: path.join(sharedDir, "tokenizers", "qwen3"),
  llama3: path.join(sharedDir, "tokenizers", "llama3"),
  builtin: builtinDir,
};

// Deterministic pseudo-random numbers (mulberry32).
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Pieces chosen to hit every branch of the pre-tokenizer patterns: letters
// of several scripts, digits (ASCII and not), all kinds of white space,
// apostrophes and contraction letters in both cases, punctuation, emoji,
// combining marks and characters that NFC changes.
const alphabet = [
  "a", "b", "Z", "é", "ß", "я", "Ж", "中", "文", "ก", "ា", "ន", "한", "ع", "ω",
  "0", "7", "42", "12345", "٣", "²", "½", "Ⅻ",
  " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\u000b", "\u0085",
  "'", "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'x", "'ſ", "'\u212a", "ſ", "\u0130",
  ".", ",", "!", "?", "...", "-", "=", "$", "(", ")", "{", "}", "\"", "`", "~", "_", "@", "#",
  "🦙", "😁", "🚀", "👩‍💻", "e\u0301", "A\u030a", "\u1100\u1161", "\u0915\u093f", "ﬁ",
  "Hello", " world", "don't", "I'M", "x=1;", "<think>", "<|im_start|>", "<|im_end|>", "<|eot_id|>",
  "<verify>", "</result>",
];

function randomTexts(seed, n, maxPieces) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    const k = 1 + Math.floor(r() * maxPieces);
    let s = "";
    for (let j = 0; j < k; j++) s += alphabet[Math.floor(r() * alphabet.length)];
    out.push(s);
  }
  return out;
}

const handPicked = [
  "", " ", "Hello world", "  leading and trailing  ", "tabs\tand\nnewlines\r\n\r\nend\n",
  "It's 'S 'RE 'Ve 'll 'LL he'd I'M we'RE",
  "numbers 1 12 123 1234 12345 3.14159 1,000,000 ٣٤٥ ²³ ½",
  "Ünïcödé café naïve résumé Ångström",
  "e\u0301 A\u030a \u1100\u1161 (decomposed forms NFC composes)",
  "emoji 🦙🚀😶\u200d🌫️ 👩‍💻",
  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
  "<think>\nreasoning\n</think>\n\nanswer",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "<verify>2+2=4</verify><result>correct</result>",
  "    indented code\n        more\n\n\n   \n",
  "x".repeat(300),
  "9".repeat(50),
  " ".repeat(40) + "a",
];

function gsm8k(n) {
  const lines = fs.readFileSync(path.join(sharedDir, "math", "gsm8k", "test.jsonl"), "utf8").split("\n").filter(Boolean);
  const out = [];
  for (const l of lines.slice(0, n)) {
    const row = JSON.parse(l);
    out.push(row.question, row.answer);
  }
  return out;
}

const texts = [...handPicked, ...gsm8k(10), ...randomTexts(1, 150, 30)];

const conversations = [
  { messages: [{ role: "user", content: "What is 2+2?" }], add_generation_prompt: true },
  { messages: [{ role: "system", content: "You are a careful math tutor." }, { role: "user", content: "Solve x^2 = 9.\nShow your work." }], add_generation_prompt: true },
  { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi!" }, { role: "assistant", content: "Hello. How can I help?" }, { role: "user", content: "  Count to 3.  \n" }], add_generation_prompt: true },
  { messages: [{ role: "user", content: "\nleading newline and trailing space " }], add_generation_prompt: true },
  { messages: [{ role: "user", content: "Äpfel 🦙 1314151" }, { role: "assistant", content: "<think>\nThey are apples.\n</think>\n\nApples." }], add_generation_prompt: false },
  { messages: [{ role: "user", content: "Q1" }, { role: "assistant", content: "A1" }], add_generation_prompt: false },
  { messages: [{ role: "user", content: "Q1" }, { role: "assistant", content: "<think>old reasoning</think>A1" }, { role: "user", content: "Q2" }], add_generation_prompt: true },
  { messages: [{ role: "user", content: "Think less." }], add_generation_prompt: true, enable_thinking: false },
];

function configOf(dir) {
  return JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
}

function name(tok) {
  if (tok == null) return "";
  return typeof tok === "string" ? tok : tok.content;
}

const out = { generator: "scripts/tokenizer-fixtures.mjs", versions: {}, encode: [], chat: [], decode: [], splits: [] };
for (const pkg of ["tokenizers", "@huggingface/jinja"]) {
  out.versions[pkg] = JSON.parse(fs.readFileSync(path.join(process.cwd(), "node_modules", pkg, "package.json"), "utf8")).version;
}

for (const [vname, dir] of Object.entries(vocabs)) {
  const tok = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
  const cfg = configOf(dir);
  for (const text of texts) {
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    out.encode.push({ tokenizer: vname, text, ids: enc.getIds() });
  }
  const tmpl = new Template(cfg.chat_template);
  for (const conv of conversations) {
    if (vname !== "qwen3" && conv.enable_thinking === false) continue;
    // Llama 3's template in this tokenizer_config.json always ends with the
    // generation prompt; only conversations that ask for it are compared.
    if (vname === "llama3" && !conv.add_generation_prompt) continue;
    const ctx = { messages: conv.messages, add_generation_prompt: conv.add_generation_prompt, bos_token: name(cfg.bos_token), eos_token: name(cfg.eos_token) };
    if (conv.enable_thinking !== undefined) ctx.enable_thinking = conv.enable_thinking;
    const text = tmpl.render(ctx);
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    out.chat.push({ tokenizer: vname, ...conv, text, ids: enc.getIds() });
  }
  const sample = out.chat.filter((c) => c.tokenizer === vname).slice(0, 2);
  for (const c of sample) {
    for (const skip of [false, true]) {
      out.decode.push({ tokenizer: vname, ids: c.ids, skip_special: skip, text: await tok.decode(c.ids, skip) });
    }
  }
}

// The Split pre-tokenizer's behaviours on a literal delimiter.
const hf = require("tokenizers");
for (const behavior of ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]) {
  for (const invert of [false, true]) {
    for (const input of ["the-final--countdown-", "--a-b--", "plain"]) {
      const js = behavior[0].toLowerCase() + behavior.slice(1);
      const pieces = hf.splitPreTokenizer("-", js, invert).preTokenizeString(input).map((x) => x[0]);
      out.splits.push({ delimiter: "-", behavior, invert, input, pieces });
    }
  }
}

fs.writeFileSync(outFile, JSON.stringify(out) + "\n");
console.error(`wrote ${outFile}: ${out.encode.length} encodings, ${out.chat.length} chats, ${out.decode.length} decodings`);
