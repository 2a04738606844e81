// Drives an OpenAI-compatible server (aipo serve) with the official OpenAI
// Node SDK and prints what it got as one JSON object, for the Go tests to
// check. Environment: AIPO_BASE_URL (http://127.0.0.1:PORT/v1), AIPO_MODEL,
// AIPO_API_KEY, AIPO_WRONG_KEY (a key the server must refuse).
import OpenAI from "openai";

const baseURL = process.env.AIPO_BASE_URL;
const model = process.env.AIPO_MODEL;
const client = new OpenAI({ baseURL, apiKey: process.env.AIPO_API_KEY, maxRetries: 0, timeout: 20000 });
const out = { errors: {} };

// errorOf keeps what the SDK made of a refused request.
function errorOf(e) {
  if (!(e instanceof OpenAI.APIError)) throw e;
  return { class: e.constructor.name, status: e.status, type: e.type ?? null, code: e.code ?? null, param: e.param ?? null, message: e.message };
}

async function refused(name, fn) {
  try {
    await fn();
    out.errors[name] = { status: 200 };
  } catch (e) {
    out.errors[name] = errorOf(e);
  }
}

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const text = await client.completions.create({ model, prompt: "<|bos|>Once", max_tokens: 8, temperature: 1, seed: 3, logprobs: 1 });
out.completion = text;

const ids = await client.completions.create({ model, prompt: [257, 104, 105], max_tokens: 6, temperature: 0, logprobs: 0 });
out.completionIDs = ids;

const chat = await client.chat.completions.create({
  model,
  messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "What is 2+2?" }],
  max_tokens: 8, temperature: 1, seed: 5, logprobs: true,
});
out.chat = chat;

let streamed = "";
let finish = null;
const stream = await client.completions.create({ model, prompt: "<|bos|>Once", max_tokens: 8, temperature: 1, seed: 3, stream: true });
for await (const chunk of stream) {
  streamed += chunk.choices[0]?.text ?? "";
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
out.streamed = { text: streamed, finish_reason: finish };

let chatStreamed = "";
const cs = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "What is 2+2?" }], max_tokens: 8, temperature: 1, seed: 5, stream: true,
});
for await (const chunk of cs) chatStreamed += chunk.choices[0]?.delta?.content ?? "";
out.chatStreamed = chatStreamed;

await refused("oversized", () => client.completions.create({ model, prompt: Array(130).fill(104), max_tokens: 4 }));
await refused("tokenOutOfRange", () => client.completions.create({ model, prompt: [257, 70000], max_tokens: 4 }));
await refused("negativeMaxTokens", () => client.completions.create({ model, prompt: "hi", max_tokens: -1 }));
await refused("unknownModel", () => client.completions.create({ model: "no-such-model", prompt: "hi", max_tokens: 4 }));
await refused("chatUnknownModel", () => client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] }));
const wrong = new OpenAI({ baseURL, apiKey: process.env.AIPO_WRONG_KEY, maxRetries: 0, timeout: 20000 });
await refused("wrongKey", () => wrong.completions.create({ model, prompt: "hi", max_tokens: 4 }));

process.stdout.write(JSON.stringify(out));
