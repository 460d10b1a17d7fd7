// End to end: the UI against a `favlo serve --api-key <key>` of its own.
// The prompt appears on the first 401, a wrong key is refused with a message,
// the right key loads the models, a chat streams, the Memory and Studio views
// load (MCP included), the key survives a reload, and forgetting it brings
// the prompt back. The key never shows in a request URL or the console.
//
// Key design choice: this file starts its own server (tools/ui-test.sh's one
// has no key) on a free port, from FAVLO_BIN (default target/debug/favlo) with
// FAVLO_HOME's pulled models and `--pull never`. The UI comes from the
// binary's `/` only when it embeds exactly the web/dist just built; otherwise
// a Vite preview of web/dist proxies the API to it, so the UI under test is
// always the current one.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { preview, type PreviewServer } from 'vite';
import { launch, type Launched } from './browser';

const WEB = resolve(import.meta.dirname, '..');
const ROOT = resolve(WEB, '..');
const BIN = resolve(ROOT, process.env.FAVLO_BIN ?? 'target/debug/favlo');
const HOME = resolve(ROOT, process.env.FAVLO_HOME ?? 'target/favlo-home');
const SHOTS = join(WEB, 'test-results');
const CHAT_MODEL = process.env.FAVLO_CHAT_MODEL ?? 'smollm2-135m-instruct';
const KEY = `e2e-${randomBytes(12).toString('hex')}`;
const STORAGE_KEY = 'favlo.apikey.v1';

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => (typeof a === 'object' && a ? ok(a.port) : fail(new Error('no port'))));
    });
  });
}

async function waitHttp(url: string, ms: number, proc: ChildProcess): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`favlo serve exited (${proc.exitCode}) before ${url} answered`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${url}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe('UI against favlo serve --api-key', () => {
  let server: ChildProcess;
  let ui: PreviewServer | null = null;
  let api = '';
  let uiUrl = '';
  let b: Launched;
  let page: Page;
  const urls: string[] = [];
  const consoleText: string[] = [];
  const pageErrors: string[] = [];
  const dialog = (name: string) => page.getByRole('dialog', { name });
  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `apikey-${name}.png`) });

  beforeAll(async () => {
    if (!existsSync(BIN)) throw new Error(`FAVLO_BIN=${BIN} is missing (cargo build -p favlo)`);
    if (!existsSync(join(WEB, 'dist', 'index.html'))) throw new Error('web/dist is not built (npm run build)');
    mkdirSync(SHOTS, { recursive: true });
    const port = await freePort();
    api = `http://127.0.0.1:${port}`;
    const log = openSync(join(SHOTS, 'favlo-serve-apikey.log'), 'w');
    server = spawn(BIN, ['serve', '--port', String(port), '--no-default-pull', '--pull', 'never', '--api-key', KEY], {
      env: { ...process.env, FAVLO_HOME: HOME },
      stdio: ['ignore', log, log],
    });
    closeSync(log);
    await waitHttp(`${api}/health`, 120_000, server);
    // The server itself refuses a request without the key.
    expect((await fetch(`${api}/v1/models`)).status).toBe(401);

    const served = await (await fetch(`${api}/`)).text();
    if (served === readFileSync(join(WEB, 'dist', 'index.html'), 'utf8')) {
      uiUrl = api;
    } else {
      const proxy = Object.fromEntries(['/v1', '/health', '/metrics', '/mcp'].map((p) => [p, { target: api, changeOrigin: false }]));
      const uiPort = await freePort();
      ui = await preview({
        root: WEB,
        configFile: false,
        logLevel: 'warn',
        build: { outDir: 'dist' },
        preview: { host: '127.0.0.1', port: uiPort, strictPort: true, proxy },
      });
      uiUrl = `http://127.0.0.1:${uiPort}`;
    }

    b = await launch({ width: 1280, height: 800 });
    page = b.context.pages()[0] ?? (await b.context.newPage());
    page.on('request', (r) => urls.push(r.url()));
    page.on('console', (m) => consoleText.push(m.text()));
    page.on('pageerror', (e) => pageErrors.push(e.message));
  });

  afterAll(async () => {
    await b?.close();
    await ui?.close();
    if (server && server.exitCode === null) {
      const gone = new Promise((r) => server.once('exit', r));
      server.kill('SIGTERM');
      await gone;
    }
  });

  it('prompts for the key on the first 401, with the focus in a password field', async () => {
    await page.goto(`${uiUrl}/#chat`);
    const d = dialog('This server needs an API key');
    await d.waitFor();
    expect(await d.getAttribute('aria-modal')).toBe('true');
    const field = page.getByLabel('API key', { exact: true });
    expect(await field.getAttribute('type')).toBe('password');
    await page.waitForFunction(() => document.activeElement?.id === 'api-key-input');
    expect(await page.locator(`#model-picker option[value="${CHAT_MODEL}"]`).count()).toBe(0);
    await shot('prompt');
  });

  it('refuses a wrong key with a message and stores nothing', async () => {
    await page.getByLabel('API key', { exact: true }).fill('not-the-key');
    const checked = page.waitForResponse((r) => r.url().endsWith('/v1/models') && r.request().headers().authorization === 'Bearer not-the-key');
    await page.getByLabel('API key', { exact: true }).press('Enter');
    expect((await checked).status()).toBe(401);
    const alert = page.getByRole('alert').filter({ hasText: 'The server rejected this key' });
    await alert.waitFor();
    expect(await dialog('This server needs an API key').isVisible()).toBe(true);
    expect(await page.evaluate((k) => localStorage.getItem(k), STORAGE_KEY)).toBeNull();
    await shot('wrong-key');
  });

  it('takes the right key: stored, the dialog closes and the models list loads', async () => {
    await page.getByLabel('API key', { exact: true }).fill(KEY);
    await page.getByRole('button', { name: 'Use this key' }).click();
    await dialog('This server needs an API key').waitFor({ state: 'detached' });
    await page.locator(`#model-picker option[value="${CHAT_MODEL}"]`).waitFor({ state: 'attached' });
    const rows = ((await (await fetch(`${api}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } })).json()) as { data: { id: string }[] }).data;
    const options = await page.locator('#model-picker option').evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value));
    expect(options.sort()).toEqual(rows.map((r) => r.id).sort());
    expect(await page.evaluate((k) => localStorage.getItem(k), STORAGE_KEY)).toBe(KEY);
    expect(await page.getByRole('alert').count()).toBe(0);
    await shot('models');
  });

  it('streams a chat with the key (stopped with Esc after the first words)', async () => {
    const box = page.locator('#chat-input');
    await box.fill('Count from one to fifty in words.');
    const started = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions'));
    await box.press('Enter');
    const res = await started;
    expect(res.status()).toBe(200);
    expect(res.request().headers().authorization).toBe(`Bearer ${KEY}`);
    await page.waitForFunction(() => (document.querySelector('article.msg.assistant.streaming .md')?.textContent ?? '').trim().length > 0, undefined, {
      timeout: 180_000,
    });
    await page.keyboard.press('Escape');
    await page.locator('article.msg.assistant:not(.streaming) .stats').waitFor();
    expect(await page.locator('article.msg.assistant .error, .msg .error').count()).toBe(0);
  });

  it('Memory and Studio (MCP) load with the key', async () => {
    await page.getByRole('tab', { name: 'Memory' }).click();
    await page.getByRole('heading', { name: 'Memory ledger' }).waitFor();
    await page.getByRole('tab', { name: 'Studio' }).click();
    await page.locator('[data-testid="studio-status"]', { hasText: 'MCP tool' }).waitFor();
    await shot('studio');
    await page.getByRole('tab', { name: 'Chat' }).click();
  });

  it('keeps the key across a reload, then forgets it from the header and asks again', async () => {
    await page.reload();
    await page.locator(`#model-picker option[value="${CHAT_MODEL}"]`).waitFor({ state: 'attached' });
    expect(await page.getByRole('dialog').count()).toBe(0);
    await page.getByRole('button', { name: 'API key', exact: true }).click();
    await dialog('API key').waitFor();
    await page.getByRole('button', { name: 'Forget key' }).click();
    expect(await page.evaluate((k) => localStorage.getItem(k), STORAGE_KEY)).toBeNull();
    await dialog('This server needs an API key').waitFor();
    await page.keyboard.press('Escape');
    await page.getByRole('dialog').waitFor({ state: 'detached' });
    await page.getByRole('button', { name: 'API key needed' }).waitFor();
    await page.getByRole('alert').filter({ hasText: 'This server needs an API key: enter it with the "API key" button' }).first().waitFor();
    await shot('forgotten');
    // On a phone the header still shows the key button inside the screen, and the prompt fits.
    await page.setViewportSize({ width: 390, height: 844 });
    const box = await page.getByRole('button', { name: 'API key needed' }).boundingBox();
    expect(box && box.x >= 0 && box.x + box.width <= 390).toBe(true);
    await page.getByRole('button', { name: 'API key needed' }).click();
    const d = dialog('This server needs an API key');
    await d.waitFor();
    const dbox = await d.boundingBox();
    expect(dbox && dbox.x >= 0 && dbox.x + dbox.width <= 390).toBe(true);
    await shot('phone-prompt');
    await page.getByRole('button', { name: 'Cancel' }).click();
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  it('never put the key in a URL or the console, and raised no page error', () => {
    expect(urls.length).toBeGreaterThan(5);
    for (const u of urls) expect(decodeURIComponent(u)).not.toContain(KEY);
    for (const t of consoleText) expect(t).not.toContain(KEY);
    expect(pageErrors).toEqual([]);
  });
});
