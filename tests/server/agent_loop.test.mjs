// An agent loop through the API with the prefix cache (--cache-dir): each turn's assistant
// message (a tool call) goes back as received with the tool's answer, so every prompt extends
// the previous one and the cache finds the previous prompt's whole chunks: cached_tokens grows
// every turn, over 10 turns; the SERVE_TURN record comes back under "dsv41" when asked.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, loadOpenAI, MODEL, MODEL_ID } from './harness.mjs';

const OpenAI = loadOpenAI();
const config = JSON.parse(fs.readFileSync(MODEL + '/config.json', 'utf8'));
const EOS = config.eos_token_id ?? config.text_config?.eos_token_id;
const CHUNK = 8;
let server, client, dir;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv41-serve-cache-'));
  server = await startServer(['--cache-dir', dir, '--cache-chunk', String(CHUNK), '--cache-sync', '--depth', 'exact',
    '--ctx', '4096', '--thinking', 'off']);
  client = new OpenAI({ baseURL: server.base + '/v1', apiKey: 'none', maxRetries: 0 });
});
after(async () => {
  const { code } = await server.stop();
  fs.rmSync(dir, { recursive: true, force: true });
  assert.equal(code, 0);
});

test('10 agent turns: each prompt extends the last, cached_tokens grows every turn', async () => {
  const tools = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }];
  const messages = [{ role: 'system', content: 'You are a test agent.' }, { role: 'user', content: 'Start the task.' }];
  let last = null;
  for (let turn = 0; turn < 10; turn++) {
    // The forced call is constrained to close (`lookup` has no parameters); EOS then ends it.
    const r = await client.chat.completions.create({
      model: MODEL_ID, messages, tools, temperature: 0, max_tokens: 60,
      tool_choice: { type: 'function', function: { name: 'lookup' } }, logit_bias: { [EOS]: 100 },
      dsv41: { telemetry: true },
    });
    const msg = r.choices[0].message;
    assert.equal(msg.tool_calls.length, 1);
    const rec = r.dsv41.serve_turn[0];
    assert.equal(rec.event, 'SERVE_TURN');
    assert.equal(rec.prompt_tokens, r.usage.prompt_tokens);
    assert.equal(rec.global_hit_tokens, r.usage.prompt_tokens_details.cached_tokens);
    if (last) {
      const cached = r.usage.prompt_tokens_details.cached_tokens;
      assert.ok(cached > last.cached, `turn ${turn}: cached ${cached} after ${last.cached}`);
      // The previous prompt is a prefix of this one: all its whole chunks are hits.
      assert.ok(cached >= Math.floor(last.prompt / CHUNK) * CHUNK - CHUNK, `turn ${turn}: cached ${cached}, previous prompt ${last.prompt}`);
      // The previous turn is still live in the engine (--live-turns, default 4): it is forked.
      assert.equal(rec.hit_tier, 'engine');
    }
    last = { cached: r.usage.prompt_tokens_details.cached_tokens, prompt: r.usage.prompt_tokens };
    messages.push(msg, { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: `result ${turn}` });
  }
});

test('the cached turn gives the cold turn\'s answer at --depth exact', async () => {
  const req = { model: MODEL_ID, messages: [{ role: 'user', content: 'the same question, twice over' }], temperature: 0, max_tokens: 12 };
  const cold = await client.chat.completions.create(req);
  const warm = await client.chat.completions.create(req);
  assert.ok(warm.usage.prompt_tokens_details.cached_tokens > 0);
  assert.equal(warm.choices[0].message.content, cold.choices[0].message.content);
});

test('without live turns (--live-turns 0) the next turn hits the store', async () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv41-serve-cache-'));
  const s = await startServer(['--cache-dir', d, '--cache-chunk', String(CHUNK), '--cache-sync', '--depth', 'exact',
    '--live-turns', '0', '--thinking', 'off']);
  try {
    const c = new OpenAI({ baseURL: s.base + '/v1', apiKey: 'none', maxRetries: 0 });
    const messages = [{ role: 'user', content: 'Tell me about the store.' }];
    const first = await c.chat.completions.create({ model: MODEL_ID, messages, temperature: 0, max_tokens: 16,
                                                    logit_bias: { [EOS]: -100 } });
    messages.push(first.choices[0].message, { role: 'user', content: 'And then?' });
    const second = await c.chat.completions.create({ model: MODEL_ID, messages, temperature: 0, max_tokens: 4,
                                                     dsv41: { telemetry: true } });
    const rec = second.dsv41.serve_turn[0];
    assert.equal(rec.hit_tier, 'ssd');
    // The answer comes back as text: re-rendered and re-tokenized, it need not give the ids that
    // were generated, so the hit may stop inside the chunk where the answer begins.
    assert.ok(rec.global_hit_tokens >= Math.floor(first.usage.prompt_tokens / CHUNK) * CHUNK - CHUNK,
              `hit ${rec.global_hit_tokens}, first prompt ${first.usage.prompt_tokens}`);
  } finally {
    assert.equal((await s.stop()).code, 0);
    fs.rmSync(d, { recursive: true, force: true });
  }
});
