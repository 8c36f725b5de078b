// Images through the real `dsv41 serve` over HTTP (issue 16), on the vision fixture
// tests/fixtures/vl-micro: the same image as a data: URL and as a file: URL under --image-dir
// gives the same greedy tokens and logprobs (and another image other logprobs); every way out of
// --image-dir, a missing file, a directory, an over-size file and a server without --image-dir
// are 400 invalid_image naming the image; two image requests at once both succeed, and a client
// that gives up while its image waits for the encoder leaves the server serving. The main server
// runs with the prefix cache (so repeated images hit it); `plain` without. Needs node only.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, MODEL_ID } from './harness.mjs';

const IMAGES = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../data/images');
let server, plain, dir, outside;

before(async () => {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv41-image-http-'));
  dir = path.join(base, 'images');
  outside = path.join(base, 'outside');
  fs.mkdirSync(dir);
  fs.mkdirSync(outside);
  fs.mkdirSync(path.join(dir, 'sub'));
  for (const f of ['rgb.png', 'baseline.jpg']) fs.copyFileSync(path.join(IMAGES, f), path.join(dir, f));
  fs.copyFileSync(path.join(IMAGES, 'rgb.png'), path.join(outside, 'secret.png'));
  fs.symlinkSync(path.join(outside, 'secret.png'), path.join(dir, 'escape.png'));
  // Sparse: its size is over the 32 MiB limit without writing 32 MiB.
  fs.closeSync(fs.openSync(path.join(dir, 'huge.png'), 'w'));
  fs.truncateSync(path.join(dir, 'huge.png'), 33 << 20);
  // The prefix cache on (chunks of 4, exact depth): a repeated image prompt is opened through it
  // (its keys carry the image's content) and the rest prefilled in the batch.
  server = await startServer(['--image-dir', dir, '--ctx', '256', '--parallel', '4', '--vision-threads', '2',
    '--cache-dir', path.join(base, 'cache'), '--cache-chunk', '4', '--cache-sync', '--depth', 'exact']);
  plain = await startServer(['--ctx', '256', '--vision-threads', '1']);
});
after(async () => {
  const r = await server?.stop();
  const p = await plain?.stop();
  fs.rmSync(path.dirname(dir), { recursive: true, force: true });
  assert.equal(r?.code, 0);
  assert.equal(p?.code, 0);
});

const dataUrl = (file, type = 'image/png') => `data:${type};base64,` + fs.readFileSync(path.join(IMAGES, file)).toString('base64');
const fileUrl = (p) => 'file://' + p;

function chat(base, url, extra = {}, init = {}) {
  const body = {
    model: MODEL_ID,
    messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }, { type: 'text', text: 'Look at this' }] }],
    temperature: 0,
    max_tokens: 4,
    logprobs: true,
    top_logprobs: 2,
    ...extra,
  };
  return fetch(base + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), ...init });
}

async function ok(base, url) {
  const r = await chat(base, url);
  const j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  return j;
}

test('the same image as a file: URL and as a data: URL gives the same tokens', async () => {
  const viaData = await ok(server.base, dataUrl('rgb.png'));
  const viaFile = await ok(server.base, fileUrl(path.join(dir, 'rgb.png')));
  assert.deepEqual(viaFile.choices[0].logprobs, viaData.choices[0].logprobs);
  assert.equal(viaFile.choices[0].message.content, viaData.choices[0].message.content);
  assert.equal(viaFile.usage.prompt_tokens, viaData.usage.prompt_tokens);
  // The second time, the prompt's chunks come from the cache (keyed by the image's content).
  const cached = (j) => j.usage.prompt_tokens_details?.cached_tokens ?? 0;
  assert.ok(cached(viaFile) >= 8, JSON.stringify(viaFile.usage));
  // localhost and percent-escapes name the same file.
  const escaped = await ok(server.base, 'file://localhost' + path.join(dir, 'sub', '..', 'rgb%2Epng'));
  assert.deepEqual(escaped.choices[0].logprobs, viaData.choices[0].logprobs);
  // Another image reaches the logits: not the same logprobs.
  const jpeg = await ok(server.base, fileUrl(path.join(dir, 'baseline.jpg')));
  assert.ok(cached(jpeg) < cached(viaFile), `another image hits nothing past its start: ${JSON.stringify(jpeg.usage)}`);
  const jpegData = await ok(server.base, dataUrl('baseline.jpg', 'image/jpeg'));
  assert.deepEqual(jpeg.choices[0].logprobs, jpegData.choices[0].logprobs);
  assert.notDeepEqual(jpeg.choices[0].logprobs.content[0].top_logprobs, viaData.choices[0].logprobs.content[0].top_logprobs);
});

async function refused(base, url, words, hidden = null) {
  const r = await chat(base, url);
  const j = await r.json();
  assert.equal(r.status, 400, JSON.stringify(j));
  assert.equal(j.error.code, 'invalid_image', JSON.stringify(j));
  assert.match(j.error.message, /^image 1: /, j.error.message);
  for (const w of words) assert.ok(j.error.message.includes(w), `${j.error.message} lacks ${w}`);
  if (hidden) assert.ok(!j.error.message.includes(hidden), 'the message names the target of a symlink');
}

test('paths out of --image-dir, missing files, directories and over-size files are 400 invalid_image', async () => {
  await refused(server.base, fileUrl(dir + '/../outside/secret.png'), ['outside the image directory']);
  await refused(server.base, fileUrl(dir + '/sub/%2e%2e/../outside/secret.png'), ['outside the image directory']);
  await refused(server.base, fileUrl(path.join(dir, 'escape.png')), ['outside the image directory', 'symlinks'], outside);
  await refused(server.base, fileUrl(path.join(dir, 'missing.png')), ['no such file']);
  await refused(server.base, fileUrl(path.join(dir, 'sub')), ['is a directory']);
  await refused(server.base, fileUrl(path.join(dir, 'huge.png')), ['more than the limit of 33554432']);
  await refused(server.base, 'file://example.com' + path.join(dir, 'rgb.png'), ["host 'example.com'"]);
  await refused(server.base, path.join(dir, 'rgb.png'), ['file: URL']);
  await refused(server.base, 'http://127.0.0.1:1/x.png', ['nothing is fetched from the network']);
  // The server still answers.
  await ok(server.base, dataUrl('rgb.png'));
});

test('without --image-dir a file: URL is refused, saying so', async () => {
  await refused(plain.base, fileUrl(path.join(dir, 'rgb.png')), ['--image-dir']);
  await ok(plain.base, dataUrl('rgb.png'));
});

test('two image requests at once both succeed, with the tokens each gets alone', async () => {
  const alone = await ok(server.base, dataUrl('baseline.jpg', 'image/jpeg'));
  const both = await Promise.all([ok(server.base, dataUrl('baseline.jpg', 'image/jpeg')), ok(server.base, fileUrl(path.join(dir, 'rgb.png')))]);
  assert.deepEqual(both[0].choices[0].logprobs, alone.choices[0].logprobs);
  // The server's tower with --vision-threads 2 and the single-threaded one of `plain` agree.
  const single = await ok(plain.base, dataUrl('rgb.png'));
  assert.deepEqual(both[1].choices[0].logprobs, single.choices[0].logprobs);
});

test('a client that gives up while its image waits leaves the server serving', async () => {
  const controllers = [0, 1, 2].map(() => new AbortController());
  const pending = controllers.map((c) => chat(server.base, dataUrl('rgb.png'), {}, { signal: c.signal }).catch((e) => e));
  await new Promise((r) => setTimeout(r, 5));
  for (const c of controllers) c.abort();
  for (const p of pending) await p;
  await ok(server.base, dataUrl('baseline.jpg', 'image/jpeg'));
  const h = await fetch(server.base + '/health');
  assert.equal(h.status, 200);
});
