// End to end: the built UI in Debian's chromium against a live `favlo serve`
// on the real default models. UI_URL is where the UI is served (the binary's
// own `/` or a Vite preview proxying the API); FAVLO_URL is the API itself.
//
// Key design choice: every wait is on a selector, a page condition or a
// response, never a fixed sleep. Screenshots go to web/test-results/.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { launch, type Launched } from './browser';

const UI_URL = process.env.UI_URL ?? '';
const FAVLO_URL = process.env.FAVLO_URL ?? '';
const SHOTS = join(import.meta.dirname, '..', 'test-results');
const CHAT_MODEL = process.env.FAVLO_CHAT_MODEL ?? 'smollm2-135m-instruct';

interface Row {
  id: string;
  kind: string;
  pulled: boolean;
}

/** A counter from the server's Prometheus text. */
async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${FAVLO_URL}/metrics`)).text();
  const m = new RegExp(`^${name} (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : Number.NaN;
}

/** Poll `cond` until it holds (the server notices a disconnect on its own time). */
async function until(cond: () => Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A job record straight from the server: a fresh MCP session, then media_status. */
async function mcpStatus(id: string): Promise<{ status: string; preemptions?: number }> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
  const rpc = async (body: object) => {
    const r = await fetch(`${FAVLO_URL}/mcp`, { method: 'POST', headers, body: JSON.stringify(body) });
    const sid = r.headers.get('mcp-session-id');
    if (sid) Object.assign(headers, { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' });
    const text = await r.text();
    const line = text.split('\n').find((l) => l.startsWith('data: {'));
    return line ? (JSON.parse(line.slice(6)) as { result?: { structuredContent?: { status: string; preemptions?: number } } }) : {};
  };
  await rpc({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'e2e', version: '0' } } });
  await rpc({ jsonrpc: '2.0', method: 'notifications/initialized' });
  const reply = await rpc({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'media_status', arguments: { id } } });
  const rec = reply.result?.structuredContent;
  if (!rec) throw new Error(`no media_status record for ${id}`);
  return rec;
}

async function apiModels(): Promise<Row[]> {
  const r = await fetch(`${FAVLO_URL}/v1/models`);
  return ((await r.json()) as { data: Row[] }).data;
}

const VIEWPORTS = [
  { name: 'desktop', width: 1280, height: 800 },
  { name: 'phone', width: 390, height: 844 },
];

if (!UI_URL || !FAVLO_URL) throw new Error('set UI_URL and FAVLO_URL (tools/ui-test.sh does)');
mkdirSync(SHOTS, { recursive: true });

for (const vp of VIEWPORTS) {
  describe(`UI at ${vp.width}x${vp.height}`, () => {
    let b: Launched;
    let page: Page;
    const pageErrors: string[] = [];
    const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${vp.name}-${name}.png`), fullPage: false });
    const assistant = () => page.locator('article.msg.assistant');
    /** The Studio's kind picker: radios drawn as labelled pills. */
    const pickKind = async (name: string) => {
      await page.locator('.kind-picker label', { hasText: name }).click();
      expect(await page.getByRole('radio', { name }).isChecked()).toBe(true);
    };

    beforeAll(async () => {
      b = await launch({ width: vp.width, height: vp.height });
      page = b.context.pages()[0] ?? (await b.context.newPage());
      page.on('pageerror', (e) => pageErrors.push(e.message));
    });
    afterAll(async () => {
      await b?.close();
    });

    it('lists the server\'s models in the picker with kind, pulled and resident', async () => {
      await page.goto(`${UI_URL}/#chat`);
      const rows = await apiModels();
      await page.locator(`#model-picker option[value="${CHAT_MODEL}"]`).waitFor({ state: 'attached' });
      const options = await page.locator('#model-picker option').evaluateAll((os) =>
        os.map((o) => ({ value: (o as HTMLOptionElement).value, text: o.textContent ?? '', disabled: (o as HTMLOptionElement).disabled })),
      );
      for (const r of rows) {
        const o = options.find((x) => x.value === r.id);
        expect(o, r.id).toBeDefined();
        expect(o?.text).toContain(r.kind);
        expect(o?.text).toContain(r.pulled ? 'pulled' : 'not pulled');
        expect(o?.disabled).toBe(r.kind !== 'chat');
      }
      expect(await page.locator('#model-picker').inputValue()).toBe(CHAT_MODEL);
      await expect(page.getByLabel('Message', { exact: true }).isVisible()).resolves.toBe(true);
      await shot('chat-empty');
    });

    it('keeps Shift+Enter as a new line without sending', async () => {
      const box = page.locator('#chat-input');
      await box.click();
      await box.pressSequentially('first');
      await box.press('Shift+Enter');
      await box.pressSequentially('second');
      expect(await box.inputValue()).toBe('first\nsecond');
      expect(await page.locator('article.msg').count()).toBe(0);
      await box.fill('');
    });

    it('stops a reply mid-stream (Esc on desktop, the Stop button on a phone)', async () => {
      const disconnects = await metric('favlo_client_disconnects_total');
      expect(disconnects).not.toBeNaN();
      const box = page.locator('#chat-input');
      await box.fill('Write a very long story about a dragon who learns to bake bread. Use many chapters.');
      const started = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions') && r.status() === 200);
      await box.press('Enter');
      await started;
      // Streamed text appears while the reply is still streaming.
      await page.waitForFunction(() => {
        const el = document.querySelector('article.msg.assistant.streaming .md');
        return !!el && (el.textContent ?? '').trim().split(/\s+/).length >= 4;
      });
      await expect(page.locator('button.stop').isVisible()).resolves.toBe(true);
      await shot('chat-streaming');
      if (vp.name === 'desktop') await page.keyboard.press('Escape');
      else await page.getByRole('button', { name: 'Stop generating' }).click();
      await page.locator('article.msg.assistant:not(.streaming) .stats', { hasText: 'stopped' }).waitFor();
      await page.locator('button.send').waitFor();
      const text = (await assistant().last().locator('.md').textContent()) ?? '';
      expect(text.trim().length).toBeGreaterThan(0);
      // The server saw the client go and stopped generating.
      await until(async () => (await metric('favlo_client_disconnects_total')) > disconnects, 30_000);
    });

    it('sends a chat with Enter and shows the streamed reply with tokens/s', async () => {
      // A fresh conversation, so the stopped story is not continued.
      await page.getByRole('button', { name: 'Start a new conversation' }).click();
      await page.locator('article.msg').first().waitFor({ state: 'detached' });
      const box = page.locator('#chat-input');
      await box.fill('Say hello in one short sentence.');
      const before = await assistant().count();
      // Record whether text ever shows inside a reply that is still streaming.
      await page.evaluate(() => {
        const w = window as unknown as { __streamed?: boolean };
        w.__streamed = false;
        new MutationObserver(() => {
          if ((document.querySelector('article.msg.assistant.streaming .md')?.textContent ?? '').trim()) w.__streamed = true;
        }).observe(document.body, { subtree: true, childList: true, characterData: true });
      });
      const done = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions'));
      await box.press('Enter');
      expect((await done).status()).toBe(200);
      // The user turn shows at once, then the streamed assistant turn.
      await page.locator('article.msg.user', { hasText: 'Say hello in one short sentence.' }).waitFor();
      const reply = page.locator('article.msg.assistant:not(.streaming)').nth(before);
      await reply.locator('.stats').waitFor({ timeout: 180_000 });
      expect(await page.evaluate(() => (window as unknown as { __streamed?: boolean }).__streamed)).toBe(true);
      const stats = (await reply.locator('.stats').textContent()) ?? '';
      expect(stats).toMatch(/\d+ tokens · \d+\.\d tok\/s · (stop|length)/);
      expect(((await reply.locator('.md').textContent()) ?? '').trim().length).toBeGreaterThan(0);
      await shot('chat-done');
    });

    it('keeps the conversation across a reload (localStorage)', async () => {
      const n = await page.locator('article.msg').count();
      await page.reload();
      await page.locator('article.msg').nth(n - 1).waitFor();
      expect(await page.locator('article.msg').count()).toBe(n);
    });

    it('shows the ledger with the resident chat runtime after a chat', async () => {
      await page.getByRole('tab', { name: 'Memory' }).click();
      await page.locator('[data-testid="resident"]', { hasText: CHAT_MODEL }).waitFor();
      await page.getByRole('meter', { name: 'Live' }).waitFor();
      const owners = page.locator('ul.owners > li');
      await owners.first().waitFor();
      expect(await owners.count()).toBeGreaterThan(0);
      const live = Number(await page.getByRole('meter', { name: 'Live' }).getAttribute('aria-valuenow'));
      expect(live).toBeGreaterThan(0);
      // It refreshes: a second /v1/memory answer arrives while the view is shown.
      await page.waitForResponse((r) => r.url().endsWith('/v1/memory') && r.ok());
      await shot('memory');
    });

    it('says plainly in the Studio what media the server serves', async () => {
      await page.getByRole('tab', { name: 'Studio' }).click();
      const rows = await apiModels();
      const media = rows.filter((r) => ['image', 'video', 'voice', 'music'].includes(r.kind));
      const mcp = await fetch(`${FAVLO_URL}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      const status = page.locator('[data-testid="studio-status"]');
      if (!media.some((r) => r.pulled)) {
        await status.filter({ hasText: 'No media models are served yet' }).waitFor();
      } else if (mcp.status === 404 || mcp.status === 405) {
        await status.filter({ hasText: 'No media jobs are served yet' }).waitFor();
      } else {
        await status.filter({ hasText: 'MCP tool' }).waitFor();
      }
      for (const r of media) await page.locator('table.models code', { hasText: r.id }).first().waitFor();
      await shot('studio');
    });

    it('starts an image job in the Studio and shows the image', async () => {
      await page.getByRole('tab', { name: 'Studio' }).click();
      await pickKind('Image');
      await page.getByLabel('Images').fill('4');
      await page.getByLabel('Prompt').fill('four faces');
      await shot('studio-form');
      await page.getByRole('button', { name: 'Generate image' }).click();
      const job = page.locator('[data-testid="job"][data-kind="image"]').first();
      await job.waitFor();
      const id = await job.getAttribute('data-id');
      expect(id).toMatch(/^img-/);
      const img = page.locator(`[data-testid="job"][data-id="${id}"][data-status="completed"] img`);
      await img.waitFor({ timeout: 120_000 });
      // The PNG decoded in the browser: four 64x64 faces in a row, with gutters.
      await page.waitForFunction((el) => (el as HTMLImageElement).complete && (el as HTMLImageElement).naturalWidth > 0, await img.elementHandle());
      const size = await img.evaluate((el) => [(el as HTMLImageElement).naturalWidth, (el as HTMLImageElement).naturalHeight]);
      expect(size[1]).toBeGreaterThanOrEqual(64);
      expect(size[1]).toBeLessThan(2 * 64);
      expect(size[0]).toBeGreaterThanOrEqual(4 * 64);
      expect(await page.locator(`[data-id="${id}"] [data-testid="job-line"]`).textContent()).toMatch(/^done/);
      // The download link hands over the same file under the job's name.
      const download = page.waitForEvent('download');
      await page.locator(`[data-id="${id}"] a.download`).click();
      expect((await download).suggestedFilename()).toBe(`${id}.png`);
      await img.scrollIntoViewIfNeeded();
      await shot('studio-image');
    });

    it('pauses a 10 s, 24 fps video job for a chat, then completes it', async () => {
      // The chat message is typed first, so it goes out the moment the job runs.
      await page.getByRole('tab', { name: 'Chat' }).click();
      const fresh = page.getByRole('button', { name: 'Start a new conversation' });
      if (await fresh.isEnabled()) await fresh.click();
      const box = page.locator('#chat-input');
      await box.fill('Write a very long story about a lighthouse keeper and a storm. Use many chapters.');
      await page.getByRole('tab', { name: 'Studio' }).click();
      await pickKind('Video');
      await page.getByLabel('Seconds').fill('10');
      await page.getByLabel('Frames per second').fill('24');
      await page.getByRole('button', { name: 'Generate video' }).click();
      const first = page.locator('[data-testid="job"][data-kind="video"]').first();
      await first.waitFor();
      const id = await first.getAttribute('data-id');
      expect(id).toMatch(/^vid-/);
      const job = page.locator(`[data-testid="job"][data-id="${id}"]`);
      expect(await job.getAttribute('data-status')).not.toBe('completed');
      // Send the chat while the job runs.
      await page.getByRole('tab', { name: 'Chat' }).click();
      const chat = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions') && r.status() === 200);
      await box.press('Enter');
      await chat;
      await page.getByRole('tab', { name: 'Studio' }).click();
      await page.locator(`[data-testid="job"][data-id="${id}"][data-paused="true"]`).waitFor({ timeout: 60_000 });
      expect(await job.locator('[data-testid="job-state"]').textContent()).toBe('paused');
      expect(await job.locator('[data-testid="job-line"]').textContent()).toMatch(/^paused by a chat at stage \d+( of \d+)?; resumes by itself$/);
      await job.scrollIntoViewIfNeeded();
      await shot('studio-paused');
      // Stop the chat (Esc works from any tab); the job resumes with the same id and completes.
      await page.keyboard.press('Escape');
      const video = page.locator(`[data-testid="job"][data-id="${id}"][data-status="completed"] video`);
      await video.waitFor({ timeout: 180_000 });
      expect(await job.getAttribute('data-paused')).toBe('false');
      expect(await job.locator('[data-testid="job-preemptions"]').textContent()).toMatch(/^preempted \d+× by chat/);
      const server = await mcpStatus(id ?? '');
      expect(server.status).toBe('completed');
      expect(server.preemptions).toBeGreaterThan(0);
      // The MP4 plays in chromium and lasts the 10 s asked for.
      await page.waitForFunction((el) => (el as HTMLVideoElement).readyState >= 1, await video.elementHandle());
      const duration = await video.evaluate((el) => (el as HTMLVideoElement).duration);
      expect(duration).toBeGreaterThan(9.5);
      expect(duration).toBeLessThan(10.5);
      expect(await job.locator('a.download').getAttribute('download')).toBe(`${id}.mp4`);
      await video.scrollIntoViewIfNeeded();
      await shot('studio-video');
      await page.locator('article.msg.assistant:not(.streaming) .stats', { hasText: 'stopped' }).last().waitFor({ state: 'attached' });
    });

    it('speaks text in the Studio when the server lists generate_speech', async () => {
      if ((await page.getByRole('radio', { name: 'Speech' }).count()) === 0) return;
      await pickKind('Speech');
      await page.getByLabel(/Text to speak/).fill('Hello from the Favlo studio.');
      await page.getByLabel(/Text to speak/).press('Enter');
      const first = page.locator('[data-testid="job"][data-kind="voice"]').first();
      await first.waitFor();
      const id = await first.getAttribute('data-id');
      const audio = page.locator(`[data-testid="job"][data-id="${id}"][data-status="completed"] audio`);
      await audio.waitFor({ timeout: 120_000 });
      await page.waitForFunction((el) => (el as HTMLAudioElement).readyState >= 1, await audio.elementHandle());
      const duration = await audio.evaluate((el) => (el as HTMLAudioElement).duration);
      expect(duration).toBeGreaterThan(0.5);
      expect(duration).toBeLessThan(10);
      await audio.scrollIntoViewIfNeeded();
      await shot('studio-speech');
    });

    it('drives the Studio with the keyboard: arrows pick the kind, Enter starts the job', async () => {
      await page.locator('.kind-picker input:checked').focus();
      for (let i = 0; i < 4 && !(await page.getByRole('radio', { name: 'Image' }).isChecked()); i++) await page.keyboard.press('ArrowLeft');
      await page.keyboard.press('ArrowRight');
      expect(await page.getByRole('radio', { name: 'Video' }).isChecked()).toBe(true);
      await page.keyboard.press('ArrowLeft');
      expect(await page.getByRole('radio', { name: 'Image' }).isChecked()).toBe(true);
      await page.keyboard.press('Tab');
      expect(await page.evaluate(() => document.activeElement?.id)).toBe('generate_image-prompt');
      await page.keyboard.type('typed, not clicked');
      const before = await page.locator('[data-testid="job"]').count();
      await page.keyboard.press('Enter');
      await page.locator('[data-testid="job"]').nth(before).waitFor();
      const job = page.locator('[data-testid="job"]').first();
      expect(await job.locator('.job-prompt').textContent()).toBe('“typed, not clicked”');
      await job.locator('img').waitFor({ timeout: 120_000 });
    });

    it('cancels a running video job', async () => {
      await pickKind('Video');
      await page.getByLabel('Seconds').fill('10');
      await page.getByLabel('Frames per second').fill('24');
      await page.getByRole('button', { name: 'Generate video' }).click();
      const first = page.locator('[data-testid="job"][data-kind="video"]').first();
      await first.locator('button.stop').waitFor();
      const id = await first.getAttribute('data-id');
      await page.getByRole('button', { name: `Cancel job ${id}` }).click();
      const job = page.locator(`[data-testid="job"][data-id="${id}"]`);
      await page.locator(`[data-testid="job"][data-id="${id}"][data-status="cancelled"]`).waitFor({ timeout: 60_000 });
      expect(await job.locator('[data-testid="job-state"]').textContent()).toBe('cancelled');
      expect(await job.locator('video').count()).toBe(0);
      expect(await job.locator('button.stop').count()).toBe(0);
      // The server's own record says so too.
      expect((await mcpStatus(id ?? '')).status).toBe('cancelled');
      await page.getByRole('button', { name: `Remove job ${id} from the list` }).click();
      await job.waitFor({ state: 'detached' });
    });

    it('renders in the dark color scheme', async () => {
      await page.emulateMedia({ colorScheme: 'dark' });
      await page.getByRole('tab', { name: 'Chat' }).click();
      await page.locator('article.msg').first().waitFor();
      const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
      expect(bg).toBe('rgb(19, 20, 23)');
      await shot('chat-dark');
      await page.getByRole('tab', { name: 'Studio' }).click();
      await page.locator('[data-testid="job"]').first().waitFor();
      expect(await page.evaluate(() => getComputedStyle(document.body).backgroundColor)).toBe('rgb(19, 20, 23)');
      await shot('studio-dark');
      await page.getByRole('tab', { name: 'Chat' }).click();
      await page.emulateMedia({ colorScheme: 'light' });
    });

    it('renders stored Markdown and code in the browser without running model HTML', async () => {
      const md =
        '## Result\n\nRun **this**:\n\n```python\nprint("<b>hi</b>")\n```\n\n- one `x < y`\n- two <img src=x onerror="window.__pwned=1">';
      // Written by an init script, before the app runs on the reload, so a save by the
      // running page (a models refresh updates the conversation) cannot race it.
      await page.addInitScript((content) => {
        localStorage.setItem(
          'favlo.chat.v1',
          JSON.stringify({ model: null, messages: [{ role: 'user', content: 'format test' }, { role: 'assistant', content }] }),
        );
      }, md);
      await page.reload();
      const reply = page.locator('article.msg.assistant').first();
      await reply.locator('pre code').waitFor();
      expect(await reply.locator('pre code').textContent()).toBe('print("<b>hi</b>")');
      expect(await reply.locator('h2').textContent()).toBe('Result');
      expect(await reply.locator('li').count()).toBe(2);
      expect(await reply.locator('img, b').count()).toBe(0);
      expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
      await shot('markdown');
      await page.getByRole('button', { name: 'Start a new conversation' }).click();
      await page.locator('article.msg').first().waitFor({ state: 'detached' });
    });

    it('raised no script error in the page', () => {
      expect(pageErrors).toEqual([]);
    });
  });
}
