// curl against a real `dsv41 serve`: SSE framing byte by byte, the /metrics text format, the
// bounded queue (429), /health while every slot is busy, and a graceful SIGTERM during a stream.
// Needs node and curl only (no SDK).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import { startServer, MODEL, MODEL_ID } from './harness.mjs';

const config = JSON.parse(fs.readFileSync(MODEL + '/config.json', 'utf8'));
const EOS = config.eos_token_id ?? config.text_config?.eos_token_id;
let server;

before(async () => {
  server = await startServer(['--parallel', '1', '--max-queue', '0', '--ctx', '1024', '--thinking', 'off', '--shutdown-timeout', '120']);
});
after(async () => {
  await server.stop();
});

function curl(args) {
  return new Promise((resolve, reject) => {
    execFile('curl', ['-sS', ...args], { maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
      err ? reject(new Error(stderr || err.message)) : resolve(stdout));
  });
}

const chatBody = (extra = {}) =>
  JSON.stringify({ model: MODEL_ID, messages: [{ role: 'user', content: 'Hi' }], temperature: 0, max_tokens: 10, ...extra });

test('SSE framing: data lines, blank-line separated, [DONE] last', async () => {
  const out = await curl(['-N', '-D', '-', '-H', 'Content-Type: application/json', '-d', chatBody({ stream: true, stream_options: { include_usage: true } }),
    `${server.base}/v1/chat/completions`]);
  const [head, body] = out.split('\r\n\r\n');
  assert.match(head, /^HTTP\/1\.1 200/);
  assert.match(head, /content-type: text\/event-stream/i);
  assert.ok(body.endsWith('data: [DONE]\n\n'), JSON.stringify(body.slice(-40)));
  const events = body.split('\n\n').slice(0, -1);
  let usage = null;
  for (const [i, e] of events.entries()) {
    if (e.startsWith(':')) continue; // comment (keep-alive ping)
    assert.ok(e.startsWith('data: '), e);
    assert.ok(!e.slice(6).includes('\n'), 'one line per event');
    if (e === 'data: [DONE]') {
      assert.equal(i, events.length - 1);
      continue;
    }
    const j = JSON.parse(e.slice(6));
    assert.equal(j.object, 'chat.completion.chunk');
    if (j.usage) usage = j.usage;
  }
  assert.ok(usage && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens);
});

test('comment pings keep a stream alive during a long prefill', async () => {
  const pinging = await startServer(['--sse-ping-ms', '5', '--ctx', '8000', '--prefill-chunk', '64']);
  try {
    const body = JSON.stringify({ model: MODEL_ID, prompt: 'word '.repeat(400), max_tokens: 2, stream: true });
    const out = await curl(['-N', '-H', 'Content-Type: application/json', '-d', body, `${pinging.base}/v1/completions`]);
    const events = out.split('\n\n').filter((e) => e);
    const firstText = events.findIndex((e) => e.startsWith('data: {') && JSON.parse(e.slice(6)).choices?.[0]?.text);
    assert.ok(events.slice(0, firstText).includes(': ping'), 'a ping before the first token');
    assert.equal(events.at(-1), 'data: [DONE]');
  } finally {
    await pinging.stop();
  }
});

test('/metrics is Prometheus text', async () => {
  await curl(['-H', 'Content-Type: application/json', '-d', chatBody(), `${server.base}/v1/chat/completions`]);
  const out = await curl(['-D', '-', `${server.base}/metrics`]);
  const [head, body] = out.split('\r\n\r\n');
  assert.match(head, /content-type: text\/plain; version=0\.0\.4/i);
  const typed = new Map();
  for (const line of body.trimEnd().split('\n')) {
    let m;
    if ((m = line.match(/^# TYPE (\S+) (counter|gauge|histogram)$/))) {
      typed.set(m[1], m[2]);
      continue;
    }
    if (line.startsWith('# HELP ')) continue;
    m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_]\w*="[^"]*"(,[a-zA-Z_]\w*="[^"]*")*\})? (\S+)$/);
    assert.ok(m, line);
    assert.ok(!Number.isNaN(Number(m[4])) || m[4] === '+Inf', line);
    const family = typed.has(m[1]) ? m[1] : m[1].replace(/_(bucket|sum|count)$/, '');
    assert.ok(typed.has(family), 'declared: ' + line);
  }
  for (const name of ['dsv41_requests_total', 'dsv41_prompt_tokens_total', 'dsv41_generation_tokens_total',
    'dsv41_time_to_first_token_seconds', 'dsv41_inter_token_latency_seconds', 'dsv41_requests_running',
    'dsv41_requests_waiting', 'dsv41_kv_main_bytes'])
    assert.ok(typed.has(name), name);
  assert.match(body, /dsv41_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\} [1-9]/);
  assert.match(body, /dsv41_generation_tokens_total [1-9]/);
});

test('an engine error after streaming began: an error event, then [DONE]', async () => {
  // A KV page budget of 200 KB holds a short chat but not this prompt (on the golden tiny model
  // and on dsv41-mini): the engine refuses it after the stream (and its first chunk) has started.
  const small = await startServer(['--kv-budget-mb', '0.2', '--ctx', '8000']);
  try {
    const body = JSON.stringify({ model: MODEL_ID, prompt: 'word '.repeat(2000), max_tokens: 10, stream: true });
    const out = await curl(['-N', '-H', 'Content-Type: application/json', '-d', body, `${small.base}/v1/completions`]);
    const events = out.split('\n\n').filter((e) => e);
    assert.equal(events.at(-1), 'data: [DONE]');
    const err = JSON.parse(events.at(-2).slice(6)).error;
    assert.equal(err.type, 'server_error');
    assert.equal(err.code, 'capacity_exceeded');
    assert.match(err.message, /budget/);
    const plain = await curl(['-w', '\n%{http_code}', '-H', 'Content-Type: application/json', '-d',
      JSON.stringify({ model: MODEL_ID, prompt: 'word '.repeat(2000), max_tokens: 10 }), `${small.base}/v1/completions`]);
    assert.equal(plain.split('\n').at(-1), '500');
    // The server is fine afterwards.
    const ok = await curl(['-w', '\n%{http_code}', '-H', 'Content-Type: application/json', '-d', chatBody(), `${small.base}/v1/chat/completions`]);
    assert.equal(ok.split('\n').at(-1), '200');
  } finally {
    await small.stop();
  }
});

test('a full queue answers 429; /health answers while the slot is busy; SIGTERM lets the stream finish', async () => {
  // One slot, no queue: a long stream holds it.
  const long = spawn('curl', ['-sS', '-N', '-H', 'Content-Type: application/json', '-d',
    chatBody({ stream: true, max_tokens: 900, logit_bias: { [EOS]: -100 } }), `${server.base}/v1/chat/completions`]);
  let streamed = '';
  long.stdout.on('data', (d) => (streamed += d));
  const longDone = new Promise((r) => long.on('exit', r));
  for (let i = 0; !streamed.includes('"content"'); i++) {
    assert.ok(i < 1500 && long.exitCode === null, 'the long stream started: ' + streamed.slice(0, 200));
    await new Promise((r) => setTimeout(r, 20));
  }
  const busy = await curl(['-w', '\n%{http_code}', '-H', 'Content-Type: application/json', '-d', chatBody(), `${server.base}/v1/chat/completions`]);
  const [json, code] = busy.split('\n');
  assert.equal(code, '429');
  assert.equal(JSON.parse(json).error.type, 'rate_limit_error');
  const health = await curl(['-w', '%{http_code}', '-o', '/dev/null', `${server.base}/health`]);
  assert.equal(health, '200');
  // SIGTERM now: the stream in flight still ends properly, and the server exits 0.
  server.proc.kill('SIGTERM');
  await longDone;
  assert.ok(streamed.endsWith('data: [DONE]\n\n'), streamed.slice(-80));
  assert.match(streamed, /"finish_reason":"length"/);
  const { code: exit } = await server.exited;
  assert.equal(exit, 0);
});
