// Writes transforms/chattemplate/testdata/hf_reference.json: chat templates
// rendered by Hugging Face's own Jinja implementation (npm
// "@huggingface/jinja", the renderer of transformers.js) from the
// tokenizer_config.json files under transforms/chattemplate/testdata. The
// Go tests render the same templates and message lists with the package and
// compare byte for byte; Node is not needed to run them.
//
// Run through scripts/chat-template-fixtures.sh, which installs the package.
//   node chat-template-fixtures.mjs TESTDATA_DIR
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const require = createRequire(process.cwd() + "/");
const { Template } = await import(require.resolve("@huggingface/jinja"));

const [dir] = process.argv.slice(2);
if (!dir) {
  console.error("usage: node chat-template-fixtures.mjs TESTDATA_DIR");
  process.exit(2);
}

const templates = ["qwen2.5", "qwen3", "llama3"];

// A system prompt shaped like the rollout's own (several lines, tags,
// markdown), and texts that stress escaping: quotes, backslashes, Jinja
// delimiters, chat markers, white space at both ends, scripts and emoji.
const system = "You are a careful solver.\nYou may call three agents:\n- <verify>...</verify> checks a claim\n- <knowledge>...</knowledge> recalls a fact\n- <reason>...</reason> works a step\nAt most 3 calls.";
const tricky = "  Äpfel 🦙 中文 ḱ \"quoted\" 'single' \\back\\slash {{ not jinja }} {% raw %} <|im_end|> <|eot_id|> </think>\ttab\r\nCRLF  \n";
const u = (content) => ({ role: "user", content });
const s = (content) => ({ role: "system", content });
const a = (content) => ({ role: "assistant", content });

const lists = [
  { name: "system+user", messages: [s(system), u("What is 17 * 23?")] },
  { name: "user only", messages: [u("What is 17 * 23?")] },
  { name: "empty system", messages: [s(""), u("Solve x + 2 = 5.")] },
  { name: "multi-turn", messages: [s(system), u("Q1: 2+2?"), a("4"), u("Q2: and 3+3?")] },
  { name: "multi-turn ending with the assistant", messages: [u("Q1"), a("A1"), u("Q2"), a("A2")] },
  { name: "assistant with reasoning", messages: [u("Q1"), a("<think>\nold reasoning\n</think>\n\nA1"), u("Q2")] },
  { name: "unicode and special characters", messages: [s(tricky), u(tricky)] },
  { name: "problem with white space", messages: [s(system), u("\n\n  Find n.  \n")] },
];

function name(tok) {
  if (tok == null) return null;
  return typeof tok === "string" ? tok : tok.content;
}

const out = { generator: "scripts/chat-template-fixtures.mjs", versions: {}, cases: [] };
out.versions["@huggingface/jinja"] = JSON.parse(fs.readFileSync(path.join(process.cwd(), "node_modules", "@huggingface/jinja", "package.json"), "utf8")).version;

for (const t of templates) {
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, t, "tokenizer_config.json"), "utf8"));
  const tmpl = new Template(cfg.chat_template);
  for (const list of lists) {
    for (const agp of [true, false]) {
      for (const thinking of [undefined, true, false]) {
        const ctx = { messages: list.messages, add_generation_prompt: agp };
        for (const k of ["bos_token", "eos_token"]) {
          if (name(cfg[k]) != null) ctx[k] = name(cfg[k]);
        }
        if (thinking !== undefined) ctx.enable_thinking = thinking;
        const c = { template: t, name: list.name, messages: list.messages, add_generation_prompt: agp };
        if (thinking !== undefined) c.enable_thinking = thinking;
        c.text = tmpl.render(ctx);
        out.cases.push(c);
      }
    }
  }
}

const file = path.join(dir, "hf_reference.json");
fs.writeFileSync(file, JSON.stringify(out, null, 1) + "\n");
console.error(`wrote ${file}: ${out.cases.length} renderings of ${templates.length} templates`);
