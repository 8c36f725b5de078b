// A scripted 20-turn agent session through `dsv41 serve --cache-dir` (issue 11 item 7;
// docs/STORE.md §17): a growing prompt of answers and tool outputs, pauses between turns,
// served twice — by one live server process, and with the server restarted (SIGTERM, then a new
// process on the same cache directory) after turn 10. Every turn's SERVE_TURN record comes back
// through the `dsv41: {telemetry: true}` extension; the time to first token is measured by this
// client (streaming: the first content, reasoning or tool-call delta).
//
//   node bench/agent_session.mjs --bin build/dsv41 --model models/dsv41-mini --cache-dir D --out F.json
//     [--turns 20] [--restart-after 10] [--depth bounded] [--max-tokens 16] [--chunk 256]
// Node 20 (global fetch), no npm packages. Loopback only; bounded in turns and time.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

function options() {
  const o = { bin: 'build/dsv41', model: 'models/dsv41-mini', cacheDir: '', out: '', turns: 20, restartAfter: 10,
              depth: 'bounded', maxTokens: 16, chunk: 256 };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (!(key in o)) throw new Error(`unknown option ${argv[i]}`);
    o[key] = typeof o[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!o.cacheDir || !o.out) throw new Error('give --cache-dir D and --out F.json');
  return o;
}

async function startServer(o) {
  const args = ['serve', '-m', o.model, '--port', '0', '--served-model-name', 'agent', '--cache-dir', o.cacheDir,
                '--cache-chunk', String(o.chunk), '--cache-sync', '--depth', o.depth, '--ctx', '16384',
                '--thinking', 'off', '--quiet'];
  const proc = spawn(o.bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start: ' + log)), 60000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}): ${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 1200; i++) {
    try { if ((await fetch(base + '/health')).status === 200) break; } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  return { base, stop: async () => { proc.kill('SIGTERM'); return exited; } };
}

// The tool's output for a turn: a slice of the repository's own docs, so the prompt grows by a
// few hundred tokens of real text each turn.
function toolOutput(turn) {
  const docs = ['docs/STORE.md', 'docs/REPLAY.md', 'docs/ARCHITECTURE.md'];
  const text = fs.readFileSync(docs[turn % docs.length], 'utf8');
  const start = (turn * 1777) % Math.max(1, text.length - 1600);
  return text.slice(start, start + 1200);
}

// One streamed turn: TTFT, the assistant message as received (tool call), the SERVE_TURN record.
async function turn(base, messages, o) {
  const tools = [{ type: 'function', function: { name: 'read_file', description: 'read a file of the project',
                                                 parameters: { type: 'object', properties: { path: { type: 'string' } } } } }];
  const t0 = performance.now();
  const r = await fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'agent', messages, tools, temperature: 0, max_tokens: o.maxTokens, stream: true,
                           stream_options: { include_usage: true },
                           tool_choice: 'auto',
                           dsv41: { telemetry: true } }),
  });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  let ttft = null, buf = '', record = null, usage = null;
  const msg = { role: 'assistant', content: '', tool_calls: [] };
  const decoder = new TextDecoder();
  for await (const part of r.body) {
    buf += decoder.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.error) throw new Error(JSON.stringify(chunk.error));
      if (chunk.usage) usage = chunk.usage;
      // In a stream the record rides on the choice's finishing chunk (one object per choice).
      const st = chunk.dsv41?.serve_turn;
      if (st) record = Array.isArray(st) ? st[0] : st;
      for (const c of chunk.choices ?? []) {
        const d = c.delta ?? {};
        if (ttft === null && (d.content || d.reasoning_content || d.tool_calls)) ttft = performance.now() - t0;
        if (d.content) msg.content += d.content;
        for (const tc of d.tool_calls ?? []) {
          const slot = (msg.tool_calls[tc.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
          if (tc.id) slot.id = tc.id;
          if (tc.function?.name) slot.function.name += tc.function.name;
          if (tc.function?.arguments) slot.function.arguments += tc.function.arguments;
        }
      }
    }
  }
  return { ttft_ms: ttft, total_ms: performance.now() - t0, msg, record, usage };
}

async function session(o, restartAfter, label) {
  fs.rmSync(o.cacheDir, { recursive: true, force: true });
  fs.mkdirSync(o.cacheDir, { recursive: true });
  let server = await startServer(o);
  const messages = [{ role: 'system', content: 'You are a coding agent. Read files with read_file and summarise them.' },
                    { role: 'user', content: 'Review the cache design of this project, one file at a time.' }];
  const rows = [];
  for (let k = 1; k <= o.turns; k++) {
    const t = await turn(server.base, messages, o);
    const call = t.msg.tool_calls[0];
    rows.push({ turn: k, ttft_ms: t.ttft_ms, total_ms: t.total_ms, ...t.record });
    const r = t.record ?? {};
    console.error(`${label} turn ${k}: prompt ${r.prompt_tokens}, hit ${r.global_hit_tokens} (${r.hit_tier}), swa ` +
                  `${r.swa}, ttft ${t.ttft_ms?.toFixed(0)} ms`);
    // The assistant message goes back as received. A small model seldom calls the tool: its
    // output then comes as the user's next message, as a harness that runs commands would send it.
    if (call) {
      messages.push({ role: 'assistant', content: t.msg.content || null, tool_calls: t.msg.tool_calls },
                    { role: 'tool', tool_call_id: call.id, content: toolOutput(k) });
    } else {
      messages.push({ role: 'assistant', content: t.msg.content },
                    { role: 'user', content: 'Output of the next file:\n' + toolOutput(k) });
    }
    // A pause as an agent's tool takes time; a longer one before every fifth turn.
    await new Promise((res) => setTimeout(res, k % 5 === 0 ? 3000 : 500));
    if (k === restartAfter) {
      const code = await server.stop();
      if (code !== 0) throw new Error(`server exited with ${code} at the restart`);
      server = await startServer(o);
    }
  }
  const code = await server.stop();
  if (code !== 0) throw new Error(`server exited with ${code}`);
  return rows;
}

const o = options();
const live = await session(o, 0, 'live');
const restarted = await session(o, o.restartAfter, 'restart');
fs.mkdirSync(path.dirname(path.resolve(o.out)), { recursive: true });
fs.writeFileSync(o.out, JSON.stringify({ date: new Date().toISOString(), options: o, live, restarted }, null, 2));
fs.rmSync(o.cacheDir, { recursive: true, force: true });
console.error(`wrote ${o.out}`);
