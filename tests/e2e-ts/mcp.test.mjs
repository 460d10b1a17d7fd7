// End-to-end: the official TypeScript MCP SDK against a live `favlo serve`.
// Inline mode (the finished result on the same tools/call) and task mode (the
// client advertises io.modelcontextprotocol/tasks and polls tasks/get),
// resources/read of the PNG and the MP4, media_cancel, invalid params.
// Needs FAVLO_BIN and FAVLO_HOME (dcgan-faces pulled); `npm ci` here.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, symlinkSync, openSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { z } from 'zod';

const Any = z.object({}).passthrough();
let proc;
let base;

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

before(async () => {
  const home = mkdtempSync(join(tmpdir(), 'favlo-home-'));
  symlinkSync(join(process.env.FAVLO_HOME, 'models'), join(home, 'models'));
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  proc = spawn(process.env.FAVLO_BIN, ['serve', '--port', String(port), '--no-default-pull'], {
    env: { ...process.env, FAVLO_HOME: home },
    stdio: ['ignore', 'ignore', openSync(join(home, 'serve.log'), 'w')],
  });
  for (let i = 0; i < 600; i++) {
    try { if ((await fetch(base + '/health')).ok) return; } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error('favlo serve did not answer /health');
});

after(() => proc?.kill());

async function connect(capabilities = {}) {
  const client = new Client({ name: 'favlo-e2e', version: '0' }, { capabilities });
  await client.connect(new StreamableHTTPClientTransport(new URL(base + '/mcp')));
  return client;
}

const bytes = (blob) => Buffer.from(blob, 'base64');

test('inline generate_image, resources/read PNG, invalid params', async () => {
  const c = await connect();
  const names = (await c.listTools()).tools.map((t) => t.name);
  for (const n of ['generate_image', 'generate_video', 'media_status', 'media_cancel']) assert.ok(names.includes(n), n);
  const r = await c.callTool({ name: 'generate_image', arguments: { seed: 5 } });
  assert.equal(r.isError, false);
  const s = r.structuredContent;
  assert.equal(s.status, 'completed');
  assert.equal(s.seed, 5);
  const png = bytes((await c.readResource({ uri: s.resource })).contents[0].blob);
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  assert.equal(png.readUInt32BE(16), 64);
  const inline = r.content.find((x) => x.type === 'image');
  assert.deepEqual(bytes(inline.data), png);
  await assert.rejects(c.callTool({ name: 'generate_image', arguments: { n: 99 } }), (e) => e.code === -32602);
  await assert.rejects(c.readResource({ uri: 'favlo://images/../../etc/passwd' }), (e) => e.code === -32602);
  await c.close();
});

test('task mode: generate_video polled through tasks/get, MP4 read, media_cancel', async () => {
  const c = await connect({ extensions: { 'io.modelcontextprotocol/tasks': {} } });
  const h = await c.request({ method: 'tools/call', params: { name: 'generate_video', arguments: { seed: 9, seconds: 1 } } }, Any);
  assert.equal(h.resultType, 'task');
  assert.equal(h.pollIntervalMs, 2000);
  let t;
  for (;;) {
    t = await c.request({ method: 'tasks/get', params: { taskId: h.taskId } }, Any);
    if (t.status !== 'working') break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(t.status, 'completed');
  assert.equal(t.result.structuredContent.id, h.taskId);
  const mp4 = (await c.readResource({ uri: `favlo://videos/${h.taskId}` })).contents[0];
  assert.equal(mp4.mimeType, 'video/mp4');
  assert.equal(bytes(mp4.blob).subarray(4, 8).toString(), 'ftyp');

  const long = await c.request({ method: 'tools/call', params: { name: 'generate_video', arguments: { seconds: 10, fps: 24 } } }, Any);
  const cancelled = await c.callTool({ name: 'media_cancel', arguments: { id: long.taskId } });
  assert.ok(['cancelled', 'queued', 'in_progress'].includes(cancelled.structuredContent.status));
  for (;;) {
    t = await c.request({ method: 'tasks/get', params: { taskId: long.taskId } }, Any);
    if (t.status !== 'working') break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(t.status, 'cancelled');
  await c.close();
});
