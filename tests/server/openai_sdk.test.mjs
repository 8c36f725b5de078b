// The official OpenAI Node SDK against a real `dsv41 serve` (tiny random-weight model): chat
// non-stream and stream, tool calls, n, seeds, logprobs, reasoning, completions, auth, errors,
// cancellation. A random model's text is meaningless, so the tests check the API's contract:
// shapes, that streamed deltas reassemble to the non-stream answer (greedy or seeded runs are
// deterministic), usage arithmetic, and that aborted requests free their slot.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startServer, loadOpenAI, metrics, waitFor, MODEL, MODEL_ID } from './harness.mjs';

const OpenAI = loadOpenAI();
const KEY = 'test-key-123';
const config = JSON.parse(fs.readFileSync(MODEL + '/config.json', 'utf8'));
const EOS = config.eos_token_id ?? config.text_config?.eos_token_id;
let server, client;

before(async () => {
  server = await startServer(['--api-key', KEY, '--parallel', '2', '--ctx', '2048', '--max-queue', '2', '--max-body-mb', '1', '--thinking', 'off']);
  // 5 minutes a request: under ThreadSanitizer on a loaded 2-core machine a constrained n = 3
  // request took over a minute; a server that hangs is still caught by ctest's timeout.
  client = new OpenAI({ baseURL: server.base + '/v1', apiKey: KEY, maxRetries: 0, timeout: 300000 });
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, 'clean exit on SIGTERM');
});

const user = (text) => [{ role: 'user', content: text }];
const greedy = { model: MODEL_ID, temperature: 0, max_tokens: 12 };

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

// Reassembles chat chunks into per-choice messages, as a client would.
function reassemble(chunks) {
  const out = {};
  for (const c of chunks) {
    for (const ch of c.choices) {
      const o = (out[ch.index] ??= { role: undefined, content: '', reasoning: '', tool_calls: [], finish_reason: null, logprobs: [] });
      if (ch.delta.role) o.role = ch.delta.role;
      if (ch.delta.content) o.content += ch.delta.content;
      if (ch.delta.reasoning_content) o.reasoning += ch.delta.reasoning_content;
      for (const tc of ch.delta.tool_calls ?? []) {
        const t = (o.tool_calls[tc.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
        if (tc.id) t.id = tc.id;
        if (tc.function?.name) t.function.name += tc.function.name;
        if (tc.function?.arguments) t.function.arguments += tc.function.arguments;
      }
      if (ch.logprobs?.content) o.logprobs.push(...ch.logprobs.content);
      if (ch.finish_reason) o.finish_reason = ch.finish_reason;
    }
  }
  return out;
}

test('models lists the served model with its context', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].id, MODEL_ID);
  assert.equal(list.data[0].context_length, 2048);
  const one = await client.models.retrieve(MODEL_ID);
  assert.equal(one.id, MODEL_ID);
  await assert.rejects(client.models.retrieve('nope'), (e) => e.status === 404);
});

test('chat: stream reassembles to the non-stream answer, usage adds up', async () => {
  const full = await client.chat.completions.create({ ...greedy, messages: user('Hello there') });
  assert.equal(full.object, 'chat.completion');
  assert.match(full.id, /^chatcmpl-/);
  assert.equal(full.model, MODEL_ID);
  assert.equal(full.choices.length, 1);
  const msg = full.choices[0].message;
  assert.equal(msg.role, 'assistant');
  assert.equal(typeof msg.content, 'string');
  assert.ok(!msg.content.includes('｜DSML｜'));
  assert.ok(['stop', 'length'].includes(full.choices[0].finish_reason));
  const u = full.usage;
  assert.ok(u.prompt_tokens > 0 && u.completion_tokens > 0 && u.completion_tokens <= 12);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.equal(u.prompt_tokens_details.cached_tokens, 0);

  const chunks = await collect(
    await client.chat.completions.create({ ...greedy, messages: user('Hello there'), stream: true, stream_options: { include_usage: true } }),
  );
  assert.equal(chunks[0].choices[0].delta.role, 'assistant', 'the first delta carries the role');
  assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === chunks[0].id));
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, [], 'the usage chunk has no choices');
  assert.deepEqual(last.usage, u);
  assert.ok(chunks.slice(0, -1).every((c) => c.usage === null));
  const r = reassemble(chunks)[0];
  assert.equal(r.content, msg.content);
  assert.equal(r.finish_reason, full.choices[0].finish_reason);

  // continuous_usage_stats: every chunk carries the usage so far, its completion tokens never
  // falling, the prompt's from the start; the last chunk is the whole usage.
  const running = await collect(
    await client.chat.completions.create({
      ...greedy, messages: user('Hello there'), stream: true, stream_options: { include_usage: true, continuous_usage_stats: true },
    }),
  );
  assert.ok(running.every((c) => c.usage && c.usage.prompt_tokens === u.prompt_tokens), 'usage on every chunk');
  const counts = running.map((c) => c.usage.completion_tokens);
  assert.ok(counts.every((n, i) => i === 0 || n >= counts[i - 1]), `completion tokens never fall: ${counts}`);
  assert.equal(counts[0], 0, 'the role chunk comes before any token');
  assert.deepEqual(running.at(-1).usage, u);
  const finish = running.find((c) => c.choices.length && c.choices[0].finish_reason);
  assert.equal(finish.usage.completion_tokens, u.completion_tokens, 'the finishing chunk counts every token');
  assert.equal(reassemble(running)[0].content, msg.content);
  await assert.rejects(
    client.chat.completions.create({ ...greedy, messages: user('x'), stream: true, stream_options: { continuous_usage_stats: true } }),
    (e) => e.status === 400 && /include_usage/.test(e.message),
  );
});

test('chat: n choices, seeded sampling is reproducible and streams the same', async () => {
  const req = { model: MODEL_ID, messages: user('Pick words'), temperature: 1.0, top_p: 0.9, seed: 42, n: 3, max_tokens: 8 };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  const texts = new Set(a.choices.map((c) => c.message.content));
  assert.ok(texts.size > 1, 'choices use different seeds');
  const s = reassemble(await collect(await client.chat.completions.create({ ...req, stream: true })));
  for (const c of a.choices) assert.equal(s[c.index].content, c.message.content);
  assert.ok(a.usage.completion_tokens >= 3 && a.usage.completion_tokens <= 3 * 8, 'usage counts every choice');
});

test('chat: presence / frequency penalties stop a forced repetition, deterministically', async () => {
  // A large bias makes greedy decoding repeat one token; the penalties grow with each repeat
  // (by 2 a repeat: 48 tokens overcome a logit gap of up to ≈ 90, the bias included).
  const base = { ...greedy, max_tokens: 48, messages: user('Repeat after me'), logit_bias: { 100: 30 } };
  const plain = await client.chat.completions.create(base);
  const pen = { ...base, frequency_penalty: 2, presence_penalty: 2 };
  const a = await client.chat.completions.create(pen);
  const b = await client.chat.completions.create(pen);
  const lp = async (req) => (await client.chat.completions.create({ ...req, logprobs: true })).choices[0].logprobs.content.map((t) => t.bytes.join(','));
  const plainTokens = await lp(base), penTokens = await lp(pen);
  assert.equal(new Set(plainTokens).size, 1, 'without penalties: one token, repeated');
  assert.ok(new Set(penTokens).size > 1, 'with penalties: others win after a few repeats');
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.notEqual(a.choices[0].message.content, plain.choices[0].message.content);
});

test('chat: repetition_penalty (vLLM\'s) divides a seen token\'s positive logit: the forced repeat stops', async () => {
  const base = { ...greedy, max_tokens: 24, messages: user('Repeat after me'), logit_bias: { 100: 30 } };
  const lp = async (req) => (await client.chat.completions.create({ ...req, logprobs: true })).choices[0].logprobs.content.map((t) => t.bytes.join(','));
  const plainTokens = await lp(base);
  const pen = { ...base, repetition_penalty: 10 };
  const a = await lp(pen), b = await lp(pen);
  assert.equal(new Set(plainTokens).size, 1, 'without the penalty: one token, repeated');
  assert.ok(new Set(a).size > 1, 'with it: the token loses once it has been returned');
  assert.deepEqual(a, b);
  assert.deepEqual(await lp({ ...base, repetition_penalty: 1 }), plainTokens);
  await assert.rejects(client.chat.completions.create({ ...base, repetition_penalty: 0 }),
    (e) => e.status === 400 && e.param === 'repetition_penalty');
});

test('chat: stop strings end the text before the stop', async () => {
  const free = await client.chat.completions.create({ ...greedy, max_tokens: 20, messages: user('Go on') });
  const text = free.choices[0].message.content;
  assert.ok(text.length >= 4, 'twenty tokens of text');
  const stop = text.slice(2, 4);
  const cut = await client.chat.completions.create({ ...greedy, max_tokens: 20, messages: user('Go on'), stop: [stop] });
  assert.equal(cut.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
});

test('chat: a named tool call comes back in tool_calls, streamed as tool-call deltas', async () => {
  const tools = [
    { type: 'function', function: { name: 'now', description: 'current time', parameters: { type: 'object', properties: {} } } },
    { type: 'function', function: { name: 'other', parameters: { type: 'object', properties: { x: { type: 'string' } } } } },
  ];
  // The call's opening is forced and the rest constrained to DSML of `now` (no parameters), so
  // the call closes; EOS, allowed once it has, then ends the answer.
  const req = { ...greedy, max_tokens: 80, messages: user('What time is it?'), tools, tool_choice: { type: 'function', function: { name: 'now' } }, logit_bias: { [EOS]: 100 } };
  const full = await client.chat.completions.create(req);
  const c = full.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.content, null);
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'now');
  assert.deepEqual(JSON.parse(call.function.arguments), {});

  const chunks = await collect(await client.chat.completions.create({ ...req, stream: true }));
  const r = reassemble(chunks)[0];
  assert.equal(r.finish_reason, 'tool_calls');
  assert.equal(r.content, '');
  assert.equal(r.tool_calls.length, 1);
  assert.equal(r.tool_calls[0].function.name, call.function.name);
  assert.equal(r.tool_calls[0].function.arguments, call.function.arguments);
  assert.match(r.tool_calls[0].id, /^call_/);

  // The assistant turn goes back as received, with the tool's answer: accepted and rendered.
  const next = await client.chat.completions.create({
    ...greedy,
    messages: [...user('What time is it?'), c.message, { role: 'tool', tool_call_id: call.id, content: '12:00' }],
    tools,
  });
  assert.ok(next.usage.prompt_tokens > full.usage.prompt_tokens);

  // One tool and tool_choice "required": that tool.
  const req1 = await client.chat.completions.create({ ...req, tools: [tools[0]], tool_choice: 'required' });
  assert.equal(req1.choices[0].message.tool_calls[0].function.name, 'now');

  // tool_choice none: never a call, and never DSML in content.
  const none = await client.chat.completions.create({ ...greedy, messages: user('x'), tools, tool_choice: 'none' });
  assert.equal(none.choices[0].message.tool_calls, undefined);
  assert.ok(!none.choices[0].message.content.includes('DSML'));
  await assert.rejects(
    client.chat.completions.create({ ...req, tool_choice: { type: 'function', function: { name: 'missing' } } }),
    (e) => e.status === 400 && e.param === 'tool_choice',
  );
});

test('chat: forced calls with parameters are constrained to DSML calls of the declared tools, never content', async () => {
  // Parameters without free text: every constrained call ends within max_tokens.
  const weather = {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: { type: 'object', properties: { unit: { enum: ['c', 'f'] }, days: { type: 'integer' }, exact: { type: 'boolean' } }, required: ['unit'], additionalProperties: false },
    },
  };
  const now = { type: 'function', function: { name: 'now', parameters: { type: 'object', properties: {} } } };
  const check = (choice, names) => {
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    assert.ok(choice.message.tool_calls.length >= 1);
    for (const call of choice.message.tool_calls) {
      assert.ok(names.includes(call.function.name), call.function.name);
      const args = JSON.parse(call.function.arguments);
      if (call.function.name === 'get_weather') {
        assert.ok(['c', 'f'].includes(args.unit), call.function.arguments);
        for (const k of Object.keys(args)) assert.ok(['unit', 'days', 'exact'].includes(k), k);
        if ('days' in args) assert.ok(Number.isInteger(args.days));
        if ('exact' in args) assert.equal(typeof args.exact, 'boolean');
      } else {
        assert.deepEqual(args, {});
      }
    }
  };
  const base = { ...greedy, max_tokens: 600, messages: user('Weather?'), tools: [weather, now] };
  const named = { ...base, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
  const a = await client.chat.completions.create(named);
  check(a.choices[0], ['get_weather']);
  assert.equal(a.choices[0].message.tool_calls.length, 1);
  const s = reassemble(await collect(await client.chat.completions.create({ ...named, stream: true })))[0];
  assert.equal(s.tool_calls.length, 1);
  assert.equal(s.tool_calls[0].function.arguments, a.choices[0].message.tool_calls[0].function.arguments);
  // required, one call: the model picks a declared tool; sampled choices are all calls too.
  const one = await client.chat.completions.create({ ...base, tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed: 7, n: 3 });
  for (const c of one.choices) check(c, ['get_weather', 'now']);
  // Thinking mode: the block must follow the reasoning; the random model may not end its
  // reasoning in time, but nothing it writes reaches content.
  const t = await client.chat.completions.create({ ...named, max_tokens: 40, thinking: { type: 'enabled' } });
  assert.ok(!t.choices[0].message.content?.includes('DSML'));
  if (t.choices[0].finish_reason === 'tool_calls') check(t.choices[0], ['get_weather']);
});

test('chat: response_format json_schema / json_object: the answer is constrained JSON', async () => {
  const schema = {
    type: 'object',
    properties: { ok: { type: 'boolean' }, n: { enum: [1, 2, 3] }, mode: { enum: ['a', 'b'] }, note: { type: 'null' } },
    required: ['ok', 'n', 'mode'],
    additionalProperties: false,
  };
  const validate = (text) => {
    const v = JSON.parse(text);
    for (const k of Object.keys(v)) assert.ok(['ok', 'n', 'mode', 'note'].includes(k), k);
    assert.equal(typeof v.ok, 'boolean');
    assert.ok([1, 2, 3].includes(v.n));
    assert.ok(['a', 'b'].includes(v.mode));
    if ('note' in v) assert.equal(v.note, null);
  };
  // Every instance of this schema is short (whitespace runs are bounded too): greedy ends.
  const req = { ...greedy, max_tokens: 400, messages: user('Answer in JSON'), response_format: { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema } } };
  const full = await client.chat.completions.create(req);
  assert.equal(full.choices[0].finish_reason, 'stop');
  validate(full.choices[0].message.content);
  const s = reassemble(await collect(await client.chat.completions.create({ ...req, stream: true })))[0];
  assert.equal(s.content, full.choices[0].message.content);
  const many = await client.chat.completions.create({ ...req, temperature: 1, seed: 11, n: 3 });
  for (const c of many.choices) {
    assert.equal(c.finish_reason, 'stop');
    validate(c.message.content);
  }
  // json_object: with '}' favoured the object closes at once; EOS only then.
  const tok = async (text) => (await (await fetch(server.base + '/tokenize', { method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt: text }) })).json()).tokens;
  const [close] = await tok('}');
  const obj = await client.chat.completions.create({ ...greedy, max_tokens: 50, messages: user('x'), response_format: { type: 'json_object' }, logit_bias: { [close]: 60, [EOS]: 60 } });
  assert.equal(obj.choices[0].finish_reason, 'stop');
  assert.deepEqual(JSON.parse(obj.choices[0].message.content), {});
});

test('chat: thinking on gives reasoning_content, in the message and in deltas', async () => {
  const req = { ...greedy, messages: user('Think'), thinking: { type: 'enabled' }, reasoning_effort: 'high' };
  const full = await client.chat.completions.create(req);
  const m = full.choices[0].message;
  assert.equal(typeof m.reasoning_content, 'string');
  const rt = full.usage.completion_tokens_details.reasoning_tokens;
  assert.ok(rt >= 0 && rt <= full.usage.completion_tokens);
  if (m.content === '') assert.equal(rt, full.usage.completion_tokens, 'still thinking when cut');
  const r = reassemble(await collect(await client.chat.completions.create({ ...req, stream: true })))[0];
  assert.equal(r.reasoning, m.reasoning_content);
  assert.equal(r.content, m.content);
  const off = await client.chat.completions.create({ ...greedy, messages: user('Think'), chat_template_kwargs: { thinking: false } });
  assert.equal(off.choices[0].message.reasoning_content, undefined);
  // OpenAI's "medium" is the model's default tier, high: the same greedy answer.
  const medium = await client.chat.completions.create({ ...req, reasoning_effort: 'medium' });
  assert.equal(medium.choices[0].message.reasoning_content, m.reasoning_content);
  await assert.rejects(client.chat.completions.create({ ...req, reasoning_effort: 'extreme' }), (e) => e.status === 400 && e.param === 'reasoning_effort');
});

test('chat: thinking.budget_tokens cuts the reasoning and the answer follows', async () => {
  const req = { ...greedy, max_tokens: 16, messages: user('Think'), thinking: { type: 'enabled', budget_tokens: 3 } };
  const full = await client.chat.completions.create(req);
  const rt = full.usage.completion_tokens_details.reasoning_tokens;
  // Three, and the forced "</think>": one token, or up to eight where the tokenizer spells it.
  assert.ok(rt <= 3 + 8, `reasoning tokens ${rt}`);
  if (full.choices[0].finish_reason === 'length') assert.ok(full.usage.completion_tokens > rt, 'an answer follows the cut reasoning');
  assert.equal(typeof full.choices[0].message.content, 'string');
  const r = reassemble(await collect(await client.chat.completions.create({ ...req, stream: true })))[0];
  assert.equal(r.reasoning, full.choices[0].message.reasoning_content);
  assert.equal(r.content, full.choices[0].message.content);
  const zero = await client.chat.completions.create({ ...req, thinking: { type: 'enabled', budget_tokens: 0 } });
  assert.equal(zero.choices[0].message.reasoning_content ?? '', '');
  await assert.rejects(client.chat.completions.create({ ...req, thinking: { type: 'disabled', budget_tokens: 3 } }),
    (e) => e.status === 400 && e.param === 'thinking.budget_tokens');
});

test('chat: logprobs with top alternatives; greedy picks the most likely', async () => {
  const full = await client.chat.completions.create({ ...greedy, messages: user('Hi'), logprobs: true, top_logprobs: 3 });
  const lp = full.choices[0].logprobs.content;
  assert.equal(lp.length, full.usage.completion_tokens);
  for (const t of lp) {
    assert.equal(typeof t.token, 'string');
    assert.ok(Array.isArray(t.bytes));
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    for (let i = 1; i < 3; i++) assert.ok(t.top_logprobs[i - 1].logprob >= t.top_logprobs[i].logprob);
    assert.equal(t.logprob, t.top_logprobs[0].logprob);
  }
  const s = reassemble(await collect(await client.chat.completions.create({ ...greedy, messages: user('Hi'), logprobs: true, top_logprobs: 3, stream: true })))[0];
  assert.deepEqual(s.logprobs, lp);
  const none = await client.chat.completions.create({ ...greedy, messages: user('Hi') });
  assert.equal(none.choices[0].logprobs, null);
});

test('completions: text prompt, echo, stream and logprobs', async () => {
  const req = { model: MODEL_ID, prompt: 'The quick brown', max_tokens: 10, temperature: 0 };
  const full = await client.completions.create(req);
  assert.equal(full.object, 'text_completion');
  assert.equal(typeof full.choices[0].text, 'string');
  const echo = await client.completions.create({ ...req, echo: true, logprobs: 2 });
  assert.equal(echo.choices[0].text, 'The quick brown' + full.choices[0].text);
  assert.equal(echo.choices[0].logprobs.tokens.length, echo.usage.completion_tokens);
  let text = '';
  for await (const c of await client.completions.create({ ...req, stream: true })) text += c.choices[0]?.text ?? '';
  assert.equal(text, full.choices[0].text);
});

test('completions: a list of prompts (as evaluation harnesses send) answers each as alone, in order', async () => {
  const prompts = ['The quick brown', 'Once upon a', [1, 50, 60, 70]];
  const alone = [];
  for (const prompt of prompts) alone.push((await client.completions.create({ ...greedy, prompt })).choices[0]);
  const batch = await client.completions.create({ ...greedy, prompt: prompts, echo: true });
  assert.equal(batch.choices.length, 3);
  for (const [i, c] of batch.choices.entries()) {
    assert.equal(c.index, i);
    const head = typeof prompts[i] === 'string' ? prompts[i] : '';
    if (head) assert.equal(c.text, head + alone[i].text);
    else assert.ok(c.text.endsWith(alone[i].text), c.text);
  }
  // Usage counts each prompt once; streamed chunks carry each choice's index.
  const sampled = { model: MODEL_ID, max_tokens: 8, temperature: 1, seed: 5, n: 2 };
  const two = await client.completions.create({ ...sampled, prompt: prompts.slice(0, 2) });
  assert.deepEqual(two.choices.map((c) => c.index), [0, 1, 2, 3]);
  // Seeded: a prompt's choices are the ones it gets alone.
  const first = await client.completions.create({ ...sampled, prompt: prompts[0] });
  const second = await client.completions.create({ ...sampled, prompt: prompts[1] });
  assert.deepEqual(two.choices.map((c) => c.text), [...first.choices, ...second.choices].map((c) => c.text));
  assert.equal(two.usage.prompt_tokens, first.usage.prompt_tokens + second.usage.prompt_tokens);
  const texts = ['', '', '', ''];
  for await (const c of await client.completions.create({ ...sampled, prompt: prompts.slice(0, 2), stream: true }))
    for (const ch of c.choices) texts[ch.index] += ch.text;
  assert.deepEqual(texts, two.choices.map((c) => c.text));
  // More choices than --parallel + --max-queue (2 + 2): 429; a bad prompt is named by its index.
  await assert.rejects(client.completions.create({ ...sampled, prompt: prompts }), (e) => e.status === 429);
  await assert.rejects(client.completions.create({ ...greedy, prompt: ['a', [1, 99999999]] }),
    (e) => e.status === 400 && e.param === 'prompt[1]');
});

test('completions: best_of returns the choice with the highest mean log probability per token', async () => {
  const req = { model: MODEL_ID, prompt: 'Once upon a', max_tokens: 8, temperature: 1.2, seed: 3 };
  // The same seed gives the same three candidates as n = 3 (choice k samples with seed + k).
  const all = await client.completions.create({ ...req, n: 3, logprobs: 0 });
  const mean = (c) => c.logprobs.token_logprobs.reduce((a, b) => a + b, 0) / c.logprobs.token_logprobs.length;
  const means = all.choices.map(mean);
  const best = all.choices[means.indexOf(Math.max(...means))];
  const one = await client.completions.create({ ...req, best_of: 3 });
  assert.equal(one.choices.length, 1);
  assert.equal(one.choices[0].index, 0);
  assert.equal(one.choices[0].text, best.text);
  assert.equal(one.choices[0].logprobs, null, 'no logprobs unless asked');
  assert.equal(one.usage.completion_tokens, all.usage.completion_tokens, 'every candidate counts');
  await assert.rejects(client.completions.create({ ...req, best_of: 2, stream: true }), (e) => e.status === 400 && e.param === 'best_of');
});

test('errors: OpenAI shapes and statuses, the field named', async () => {
  const bad = async (req, status, param) =>
    assert.rejects(client.chat.completions.create(req), (e) => {
      assert.equal(e.status, status, e.message);
      if (param !== undefined) assert.equal(e.param, param);
      assert.equal(typeof e.error.message, 'string');
      return true;
    });
  await bad({ ...greedy, model: 'gpt-4o', messages: user('x') }, 404, 'model');
  await bad({ ...greedy, messages: user('x'), temperature: 5 }, 400, 'temperature');
  await bad({ ...greedy, messages: user('x'), frobnicate: true }, 400, 'frobnicate');
  await bad({ ...greedy, messages: [{ role: 'wizard', content: 'x' }] }, 400, 'messages[0].role');
  await bad({ ...greedy, messages: user('x'), response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a+' } } } }, 400, 'response_format.json_schema.schema');
  await assert.rejects(
    client.chat.completions.create({ ...greedy, messages: user('x'), response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a+' } } } }),
    (e) => e.code === 'unsupported_value' && e.message.includes("'pattern'"),
  );
  await bad({ ...greedy, messages: user('x'), response_format: { type: 'yaml' } }, 400, 'response_format.type');
  await bad({ ...greedy, messages: user('x'), max_tokens: 100000 }, 400, 'max_tokens');
  await assert.rejects(client.chat.completions.create({ ...greedy, messages: user('x'), max_tokens: 100000 }), (e) =>
    e.code === 'context_length_exceeded' && /2048 tokens/.test(e.message) && /100000/.test(e.message));
  await bad({ ...greedy, messages: user('x '.repeat(3000)) }, 400, 'messages');
  await bad({ ...greedy, messages: user('x'), logit_bias: { 99999999: 5 } }, 400, 'logit_bias');
  await assert.rejects(client.completions.create({ ...greedy, prompt: 'x', logit_bias: { 99999999: 5 } }),
    (e) => e.status === 400 && e.param === 'logit_bias' && /outside the vocabulary/.test(e.message));

  const raw = await fetch(server.base + '/v1/chat/completions', { method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' }, body: '{not json' });
  assert.equal(raw.status, 400);
  assert.ok((await raw.json()).error.message.includes('JSON'));
  const missing = await fetch(server.base + '/v1/nothing', { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(missing.status, 404);
  const body = await missing.json();
  assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
  const wrongMethod = await fetch(server.base + '/v1/chat/completions', { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(wrongMethod.status, 405);
  assert.equal(wrongMethod.headers.get('allow'), 'POST');
  assert.equal((await wrongMethod.json()).error.code, 'method_not_allowed');
  const big = await fetch(server.base + '/v1/chat/completions', { method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' }, body: 'x'.repeat(2 << 20) }).catch((e) => e);
  if (!(big instanceof Error)) assert.equal(big.status, 413);
});

test('auth: Bearer or x-api-key; /health open', async () => {
  const wrong = new OpenAI({ baseURL: server.base + '/v1', apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e.status === 401 && e.type === 'authentication_error');
  const none = await fetch(server.base + '/v1/models');
  assert.equal(none.status, 401);
  const xkey = await fetch(server.base + '/v1/models', { headers: { 'x-api-key': KEY } });
  assert.equal(xkey.status, 200);
  const health = await fetch(server.base + '/health');
  assert.equal(health.status, 200);
  assert.equal((await fetch(server.base + '/metrics')).status, 401);
});

test('tokenize and detokenize round-trip', async () => {
  const h = { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' };
  const t = await (await fetch(server.base + '/tokenize', { method: 'POST', headers: h, body: JSON.stringify({ prompt: 'hello world' }) })).json();
  assert.ok(t.tokens.length > 0 && t.count === t.tokens.length);
  const d = await (await fetch(server.base + '/detokenize', { method: 'POST', headers: h, body: JSON.stringify({ tokens: t.tokens }) })).json();
  assert.equal(d.prompt, 'hello world');
  const chat = await (await fetch(server.base + '/tokenize', { method: 'POST', headers: h, body: JSON.stringify({ messages: user('Hello there'), thinking: { type: 'disabled' } }) })).json();
  const full = await client.chat.completions.create({ ...greedy, messages: user('Hello there') });
  assert.equal(chat.count, full.usage.prompt_tokens, '/tokenize gives the prompt the chat endpoint feeds');
});

test('abort mid-stream and mid-request frees the slot', async () => {
  const auth = { Authorization: `Bearer ${KEY}` };
  const m0 = await metrics(server.base, auth);
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model: MODEL_ID, messages: user('long'), max_tokens: 1800, temperature: 0, logit_bias: { [EOS]: -100 }, stream: true },
    { signal: controller.signal },
  );
  let n = 0;
  // The SDK ends the iteration quietly once aborted.
  for await (const _ of stream) if (++n === 3) controller.abort();
  // What the server had already sent may still arrive after the abort (a loaded machine sent 133
  // chunks in one burst): the bound is the request's length; the metrics below show the cancel.
  assert.ok(n >= 3 && n < 1800, `stopped reading after ${n} chunks`);
  assert.ok(await waitFor(async () => {
    const m = await metrics(server.base, auth);
    return m['dsv41_requests_running'] === 0 && m['dsv41_requests_cancelled_total'] > (m0['dsv41_requests_cancelled_total'] ?? 0);
  }), 'the stream was cancelled and its slot freed');

  const c2 = new AbortController();
  const pending = client.chat.completions.create(
    { model: MODEL_ID, messages: user('long'), max_tokens: 1800, temperature: 0, logit_bias: { [EOS]: -100 } },
    { signal: c2.signal },
  );
  const before = (await metrics(server.base, auth))['dsv41_requests_cancelled_total'];
  assert.ok(await waitFor(async () => (await metrics(server.base, auth))['dsv41_requests_running'] === 1), 'running');
  c2.abort();
  await assert.rejects(pending);
  assert.ok(await waitFor(async () => {
    const m = await metrics(server.base, auth);
    return m['dsv41_requests_running'] === 0 && m['dsv41_engine_sequences'] === 0 && m['dsv41_requests_cancelled_total'] > before;
  }), 'the non-streaming request was cancelled too');
  // Everything still works.
  const ok = await client.chat.completions.create({ ...greedy, messages: user('after') });
  assert.equal(ok.choices.length, 1);
});
