// Starts a real `dsv41 serve` on a free loopback port for the client tests and stops it with
// SIGTERM (expecting a clean exit). Environment (set by ctest, see CMakeLists.txt):
//   DSV41_BINARY        the dsv41 executable
//   DSV41_SERVER_MODEL  the tiny model directory the tests serve
//   DSV41_SDK_DIR       where scripts/install-server-client.sh put the openai package
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';

export const BINARY = process.env.DSV41_BINARY;
export const MODEL = process.env.DSV41_SERVER_MODEL;
export const MODEL_ID = 'test-model';

export function loadOpenAI() {
  const require = createRequire(path.join(process.env.DSV41_SDK_DIR, 'package.json'));
  return require('openai');
}

export async function startServer(extraArgs = []) {
  const args = ['serve', '-m', MODEL, '--port', '0', '--served-model-name', MODEL_ID, '--threads', '1', ...extraArgs];
  const proc = spawn(BINARY, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start: ' + log)), 30000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}): ${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    try {
      const r = await fetch(base + '/health');
      if (r.status === 200) break;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    base,
    port,
    proc,
    log: () => log,
    exited,
    async stop() {
      if (proc.exitCode === null) proc.kill('SIGTERM');
      const r = await exited;
      // A failing exit (a sanitizer report, a crash) shows the server's stderr in the test log.
      if (r.code !== 0) console.error(`dsv41 serve exited with ${r.code} (${r.signal}); its stderr:\n` + log);
      return r;
    },
  };
}

// GET /metrics as {name{labels}: value}.
export async function metrics(base, headers = {}) {
  const text = await (await fetch(base + '/metrics', { headers })).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export async function waitFor(predicate, ms = 10000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await predicate()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

// A chat answer streamed (SSE) and whole, greedy, from the server at `base`: [streamed, whole].
export async function streamedAndWholeChat(base, content = 'Hello', maxTokens = 8) {
  const body = { model: MODEL_ID, messages: [{ role: 'user', content }], max_tokens: maxTokens, temperature: 0 };
  const post = (b) => fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(b),
  });
  const whole = await (await post(body)).json();
  const r = await post({ ...body, stream: true });
  if (r.status !== 200) throw new Error(`streamed chat: HTTP ${r.status}: ${await r.text()}`);
  let text = '';
  for (const line of (await r.text()).split('\n'))
    if (line.startsWith('data: {')) text += JSON.parse(line.slice(6)).choices[0]?.delta?.content ?? '';
  return [text, whole.choices[0].message.content];
}
