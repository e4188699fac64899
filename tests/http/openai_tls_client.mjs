// The official `openai` npm client over HTTPS (run by tls_test.py): with a
// client certificate it streams a greedy completion and prints its text;
// without one it prints how the connection failed.
//
// usage: node openai_tls_client.mjs OPENAI_PACKAGE_DIR BASE_URL TOKEN PROMPT MAX_TOKENS CA [CERT KEY]
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import https from "node:https";

const [packageDir, baseURL, token, prompt, maxTokens, ca, cert, key] = process.argv.slice(2);
const require = createRequire(packageDir + "/");
const OpenAI = require("openai").default ?? require("openai");

const agent = new https.Agent({
  ca: readFileSync(ca),
  ...(cert ? { cert: readFileSync(cert), key: readFileSync(key) } : {}),
});
const client = new OpenAI({ baseURL, apiKey: token, maxRetries: 0, timeout: 30000, httpAgent: agent });
const out = {};
try {
  const stream = await client.completions.create({
    model: "splitspec", prompt, max_tokens: Number(maxTokens), temperature: 0, stream: true,
  });
  out.streamed = "";
  out.chunks = 0;
  for await (const chunk of stream) {
    if (chunk.choices.length) {
      out.streamed += chunk.choices[0].text ?? "";
      out.chunks += 1;
    }
  }
} catch (e) {
  // The client wraps the socket's error; its cause names the TLS failure.
  out.error = e.constructor.name;
  out.status = e.status ?? null;
  out.cause = String(e.cause?.code ?? e.cause?.message ?? e.message);
}
console.log(JSON.stringify(out));
