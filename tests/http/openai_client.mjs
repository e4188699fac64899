// The official `openai` npm client against splitspec-server's HTTP endpoint
// (run by openai_test.py): a streamed and a whole greedy completion, a chat
// completion streamed and whole, and a call with a wrong token. Prints what
// it saw as one JSON object.
//
// usage: node openai_client.mjs OPENAI_PACKAGE_DIR BASE_URL TOKEN PROMPT MAX_TOKENS
import { createRequire } from "node:module";

const [packageDir, baseURL, token, prompt, maxTokens] = process.argv.slice(2);
const require = createRequire(packageDir + "/");
const OpenAI = require("openai").default ?? require("openai");

const client = new OpenAI({ baseURL, apiKey: token, maxRetries: 0 });
const out = {};

const stream = await client.completions.create({
  model: "splitspec", prompt, max_tokens: Number(maxTokens), temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
out.streamed = "";
out.streamed_chunks = 0;
for await (const chunk of stream) {
  if (chunk.choices.length) {
    out.streamed += chunk.choices[0].text ?? "";
    out.streamed_chunks += 1;
    if (chunk.choices[0].finish_reason) out.streamed_finish = chunk.choices[0].finish_reason;
  }
  if (chunk.usage) out.streamed_usage = chunk.usage;
}

const whole = await client.completions.create({ model: "splitspec", prompt, max_tokens: Number(maxTokens), temperature: 0 });
out.whole = whole.choices[0].text;
out.whole_finish = whole.choices[0].finish_reason;
out.usage = whole.usage;

const messages = [{ role: "system", content: "You tell short stories." }, { role: "user", content: prompt }];
const chat = await client.chat.completions.create({ model: "splitspec", messages, max_tokens: 12, temperature: 0 });
out.chat = chat.choices[0].message.content;
out.chat_role = chat.choices[0].message.role;
const chatStream = await client.chat.completions.create({ model: "splitspec", messages, max_tokens: 12, temperature: 0, stream: true });
out.chat_streamed = "";
for await (const chunk of chatStream) out.chat_streamed += chunk.choices[0]?.delta?.content ?? "";

out.models = (await client.models.list()).data.map((m) => m.id);

try {
  await new OpenAI({ baseURL, apiKey: "not-a-token", maxRetries: 0 }).completions.create({ model: "splitspec", prompt, max_tokens: 4 });
  out.unauthorized = 200;
} catch (e) {
  out.unauthorized = e.status;
}
console.log(JSON.stringify(out));
