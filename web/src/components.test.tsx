import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { render } from 'preact';
import type { ModelRow, MemoryLedger } from './api';
import { ModelPicker, describeModel } from './components/model-picker';
import { MessageView, formatStats } from './components/message';
import { StudioView } from './views/studio';
import { MemoryView } from './views/memory';
import { pickDefaultModel } from './views/chat';
import { fakeServer } from './testing/fake-mcp';

const ROWS: ModelRow[] = [
  { id: 'small-chat', kind: 'chat', pulled: true, resident: true },
  { id: 'big-chat', kind: 'chat', pulled: false, resident: false },
  { id: 'minilm', kind: 'embeddings', pulled: true, resident: false },
  { id: 'faces', kind: 'image', pulled: false, resident: false },
];

let root: HTMLDivElement;
beforeEach(() => {
  root = document.createElement('div');
  document.body.appendChild(root);
});
afterEach(() => {
  render(null, root);
  root.remove();
  vi.unstubAllGlobals();
});

/** A fetch answering by path; unknown paths get 404. */
function stubFetch(routes: Record<string, () => Response>) {
  vi.stubGlobal('fetch', async (url: string) => {
    const r = routes[new URL(url, 'http://x').pathname];
    return r ? r() : new Response('', { status: 404 });
  });
}
const json = (v: unknown) => () => new Response(JSON.stringify(v), { headers: { 'content-type': 'application/json' } });

describe('ModelPicker', () => {
  it('lists every row, chat rows selectable, with kind, pulled and resident', () => {
    render(<ModelPicker models={ROWS} value="small-chat" disabled={false} onChange={() => undefined} />, root);
    const opts = Array.from(root.querySelectorAll('option'));
    expect(opts.map((o) => o.value)).toEqual(['small-chat', 'big-chat', 'minilm', 'faces']);
    expect(opts.map((o) => o.disabled)).toEqual([false, false, true, true]);
    expect(opts[0].textContent).toBe('small-chat (chat, pulled, resident)');
    expect(opts[1].textContent).toBe('big-chat (chat, not pulled)');
    expect(root.querySelector('label')?.getAttribute('for')).toBe('model-picker');
    expect(root.querySelector('[aria-label="Selected model state"]')?.textContent).toBe('chatpulledresident');
  });

  it('picks the saved chat model, else the resident, else a pulled one', () => {
    expect(pickDefaultModel(ROWS, 'big-chat')).toBe('big-chat');
    expect(pickDefaultModel(ROWS, 'minilm')).toBe('small-chat');
    expect(pickDefaultModel(ROWS.map((r) => ({ ...r, resident: false })).reverse(), null)).toBe('small-chat');
    expect(pickDefaultModel([], null)).toBeNull();
    expect(describeModel(ROWS[2])).toBe('minilm (embeddings, pulled)');
  });
});

describe('MessageView', () => {
  it('renders assistant Markdown without letting HTML through', () => {
    render(<MessageView message={{ role: 'assistant', content: '**hi** <img src=x onerror="alert(1)">\n```\n<b>x</b>\n```' }} />, root);
    expect(root.querySelector('img')).toBeNull();
    expect(root.querySelector('b')).toBeNull();
    expect(root.querySelector('strong')?.textContent).toBe('hi');
    expect(root.querySelector('pre code')?.textContent).toBe('<b>x</b>');
  });

  it('shows user text as text and the stats line', () => {
    render(
      <MessageView message={{ role: 'user', content: '<i>raw</i> **not md**', stats: { tokens: 3, tokensPerSecond: 12.345, finish: 'stop' } }} />,
      root,
    );
    expect(root.querySelector('i')).toBeNull();
    expect(root.querySelector('.plain')?.textContent).toBe('<i>raw</i> **not md**');
    expect(root.querySelector('.stats')?.textContent).toBe('3 tokens · 12.3 tok/s · stop');
    expect(formatStats(1, null, null)).toBe('1 token');
  });
});

describe('StudioView', () => {
  it('says no media models are served when none is pulled', async () => {
    stubFetch({ '/v1/models': json({ data: ROWS }) });
    render(<StudioView />, root);
    await vi.waitFor(() => expect(root.querySelector('[data-testid="studio-status"]')?.textContent).toContain('No media models are served yet'));
    expect(root.querySelector('table.models')?.textContent).toContain('favlo pull faces');
  });

  it('says media jobs are not served when the models are pulled but /mcp is missing', async () => {
    stubFetch({ '/v1/models': json({ data: ROWS.map((r) => ({ ...r, pulled: true })) }) });
    render(<StudioView />, root);
    await vi.waitFor(() =>
      expect(root.querySelector('[data-testid="studio-status"]')?.textContent).toContain('No media jobs are served yet: this server has no MCP endpoint at /mcp (HTTP 404)'),
    );
    // "Check again" probes anew: here the endpoint has appeared meanwhile.
    vi.stubGlobal('fetch', fakeServer({ tools: [{ name: 'generate_image' }], models: ROWS.map((r) => ({ ...r, pulled: true })), jobs: [] }).fetch);
    Array.from(root.querySelectorAll('button')).find((b) => b.textContent === 'Check again')?.click();
    await vi.waitFor(() => expect(root.querySelector('[data-testid="studio-status"]')?.textContent).toContain('1 MCP tool at /mcp: generate_image.'));
    expect(root.querySelector('button.send')?.getAttribute('aria-label')).toBe('Generate image');
  });
});

describe('MemoryView', () => {
  it('shows budget, live, pending, room, owners and the resident runtime', async () => {
    const ledger: MemoryLedger = {
      device: 'cpu',
      budget: 8 * 2 ** 30,
      cap: null,
      live: 2 ** 30,
      pending: 2 ** 29,
      room: 6.5 * 2 ** 30,
      owners: [{ owner: 'llama:1', bytes: 2 ** 30, spans: 12, kinds: { resident: 3 * 2 ** 28, scratch: 2 ** 28 } }],
      resident: 'small-chat',
      embeddings: null,
    };
    stubFetch({ '/v1/memory': json(ledger) });
    render(<MemoryView />, root);
    await vi.waitFor(() => expect(root.querySelector('[data-testid="resident"]')?.textContent).toBe('small-chat'));
    const meter = (name: string) => root.querySelector(`[role="meter"][aria-label="${name}"]`);
    expect(meter('Live')?.getAttribute('aria-valuenow')).toBe(String(2 ** 30));
    expect(meter('Live')?.getAttribute('aria-valuetext')).toBe('1.00 GiB of 8.00 GiB');
    expect((meter('Pending')?.firstElementChild as HTMLElement).style.width).toBe('6.25%');
    expect(meter('Room')?.getAttribute('aria-valuenow')).toBe(String(6.5 * 2 ** 30));
    expect(root.querySelector('.owners')?.textContent).toContain('llama:1');
    expect(root.querySelector('.owners')?.textContent).toContain('12 spans');
    expect(root.querySelector('.kinds')?.textContent).toBe('resident: 768 MiBscratch: 256 MiB');
    expect(root.querySelector('[data-testid="embeddings"]')?.textContent).toBe('none');
    expect(root.querySelector('.device-ledger')).toBeNull();
  });

  it('shows each accelerator ledger an open model holds beside the host one', async () => {
    const ledger: MemoryLedger = {
      device: 'cpu',
      budget: 8 * 2 ** 30,
      cap: null,
      live: 2 ** 26,
      pending: 0,
      room: 8 * 2 ** 30 - 2 ** 26,
      owners: [{ owner: 'llama:7', bytes: 2 ** 26, spans: 3, kinds: { scratch: 2 ** 26 } }],
      resident: 'smollm2-135m-instruct',
      embeddings: null,
      devices: [
        {
          device: 'cuda:0',
          budget: 140 * 2 ** 30,
          cap: null,
          live: 2 ** 30,
          pending: 0,
          room: 139 * 2 ** 30,
          owners: [{ owner: 'llama:7', bytes: 2 ** 30, spans: 40, kinds: { resident: 3 * 2 ** 28, scratch: 2 ** 28 } }],
        },
      ],
    };
    stubFetch({ '/v1/memory': json(ledger) });
    render(<MemoryView />, root);
    await vi.waitFor(() => expect(root.querySelector('.device-ledger')).not.toBeNull());
    const gpu = root.querySelector('.device-ledger') as HTMLElement;
    expect(gpu.getAttribute('aria-label')).toBe('cuda:0 ledger');
    expect(gpu.querySelector('h3')?.textContent).toBe('Accelerator cuda:0');
    expect(gpu.textContent).toContain('140 GiB');
    const meter = (name: string) => root.querySelector(`[role="meter"][aria-label="${name}"]`);
    // Host and device bars stay apart: the same owner holds memory in both.
    expect(meter('Live')?.getAttribute('aria-valuenow')).toBe(String(2 ** 26));
    expect(meter('cuda:0 Live')?.getAttribute('aria-valuenow')).toBe(String(2 ** 30));
    expect(meter('cuda:0 Live')?.getAttribute('aria-valuetext')).toBe('1.00 GiB of 140 GiB');
    expect(meter('cuda:0 llama:7 bytes')?.getAttribute('aria-valuenow')).toBe(String(2 ** 30));
    expect(meter('llama:7 bytes')?.getAttribute('aria-valuenow')).toBe(String(2 ** 26));
    expect(gpu.querySelector('.kinds')?.textContent).toBe('resident: 768 MiBscratch: 256 MiB');
  });
});
