// The API key gate against a fake keyed server at the fetch boundary: the
// header on every request, the 401 prompt, wrong and right keys, cancel,
// abort, a stale stored key, refused storage, forget; and that the API, chat
// and MCP clients all go through it.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { API_KEY_STORAGE, AuthGate, gate, KEY_REFUSED, keyProblem, loadApiKey, saveApiKey, withKey, type GateState } from './auth';
import { listModels, getMemory } from './api';
import { streamChat } from './chat';
import { McpClient } from './mcp';

const KEY = 'sk-favlo-7Qx!9 z';
const UNAUTHORIZED = {
  error: { message: 'invalid or missing API key; send `Authorization: Bearer <key>`', type: 'invalid_request_error', code: 'invalid_api_key' },
};

interface Seen {
  url: string;
  auth: string | null;
}

/** A server that wants `Bearer <key()>` on /v1/* and /mcp, as `favlo serve --api-key` does. */
function keyedServer(key: () => string, answer: (path: string, init?: RequestInit) => Response = okFor) {
  const seen: Seen[] = [];
  const fetchImpl = (async (input: unknown, init?: RequestInit) => {
    const url = String(input);
    const auth = new Headers(init?.headers).get('authorization');
    seen.push({ url, auth });
    if (init?.signal?.aborted) throw new DOMException('aborted', 'AbortError');
    if (auth !== `Bearer ${key()}`)
      return new Response(JSON.stringify(UNAUTHORIZED), { status: 401, headers: { 'content-type': 'application/json' } });
    return answer(new URL(url, 'http://127.0.0.1').pathname, init);
  }) as typeof fetch;
  return { fetch: fetchImpl, seen };
}

function okFor(path: string): Response {
  if (path === '/v1/models') return Response.json({ data: [{ id: 'small-chat', kind: 'chat', pulled: true, resident: false }] });
  if (path === '/v1/memory') return Response.json({ device: 'cpu', budget: 1, cap: null, live: 0, pending: 0, room: 1, owners: [], resident: null, embeddings: null });
  return new Response('', { status: 404 });
}

/** A Storage over a Map; `refuse` makes writes throw like a full or private-mode store. */
function memStore(refuse = false): Storage {
  const m = new Map<string, string>();
  return {
    get length() {
      return m.size;
    },
    clear: () => m.clear(),
    getItem: (k) => m.get(k) ?? null,
    key: (i) => Array.from(m.keys())[i] ?? null,
    removeItem: (k) => void m.delete(k),
    setItem: (k, v) => {
      if (refuse) throw new DOMException('quota', 'QuotaExceededError');
      m.set(k, v);
    },
  };
}

/** Resolves when the gate's state satisfies `cond`. */
function when(g: AuthGate, cond: (s: GateState) => boolean): Promise<GateState> {
  if (cond(g.state)) return Promise.resolve(g.state);
  return new Promise((resolve) => {
    const off = g.subscribe((s) => {
      if (cond(s)) {
        off();
        resolve(s);
      }
    });
  });
}

describe('key storage and header', () => {
  it('stores under favlo.apikey.v1, rejects unusable keys, reports refused writes', () => {
    const store = memStore();
    expect(loadApiKey(store)).toBeNull();
    expect(saveApiKey(KEY, store)).toBe(true);
    expect(store.getItem('favlo.apikey.v1')).toBe(KEY);
    expect(loadApiKey(store)).toBe(KEY);
    store.setItem(API_KEY_STORAGE, 'bad\nkey');
    expect(loadApiKey(store)).toBeNull();
    expect(saveApiKey(KEY, memStore(true))).toBe(false);
    expect(keyProblem('')).toMatch(/Enter the key/);
    expect(keyProblem('clé')).toMatch(/printable ASCII/);
    expect(keyProblem('a\tb')).toMatch(/printable ASCII/);
    expect(keyProblem(KEY)).toBeNull();
  });

  it('adds Authorization without dropping the caller\'s headers', () => {
    const h = new Headers(withKey({ method: 'POST', headers: { accept: 'text/event-stream', 'mcp-session-id': 's' } }, KEY).headers);
    expect(h.get('authorization')).toBe(`Bearer ${KEY}`);
    expect(h.get('accept')).toBe('text/event-stream');
    expect(h.get('mcp-session-id')).toBe('s');
    expect(new Headers(withKey({ headers: { accept: 'x' } }, null).headers).get('authorization')).toBeNull();
  });
});

describe('AuthGate', () => {
  it('sends the stored key and never prompts when the server accepts it', async () => {
    const store = memStore();
    saveApiKey(KEY, store);
    const srv = keyedServer(() => KEY);
    const g = new AuthGate({ fetchImpl: srv.fetch, store: () => store });
    const res = await g.fetch('/v1/models', { headers: { accept: 'application/json' } });
    expect(res.status).toBe(200);
    expect(srv.seen).toEqual([{ url: '/v1/models', auth: `Bearer ${KEY}` }]);
    expect(g.state.open).toBe(false);
    expect(g.state.hasKey).toBe(true);
  });

  it('sends no header without a key; a 401 prompts once, a wrong key is refused, the right one is stored and every waiting request retried', async () => {
    const store = memStore();
    const srv = keyedServer(() => KEY);
    const g = new AuthGate({ fetchImpl: srv.fetch, store: () => store });
    let opens = 0;
    let wasOpen = false;
    g.subscribe((s) => {
      if (s.open && !wasOpen) opens += 1;
      wasOpen = s.open;
    });
    const a = g.fetch('/v1/models');
    const b = g.fetch('/v1/memory');
    const s = await when(g, (x) => x.open);
    expect(s.mode).toBe('needed');
    expect(s.staleKey).toBe(false);
    expect(s.needed).toBe(true);
    expect(srv.seen.map((x) => x.auth)).toEqual([null, null]);

    expect(await g.submit('  nope  ')).toBe(false);
    expect(g.state.open).toBe(true);
    expect(g.state.error).toBe('The server rejected this key. Check it and try again.');
    expect(store.getItem(API_KEY_STORAGE)).toBeNull();
    expect(srv.seen[2]).toEqual({ url: '/v1/models', auth: 'Bearer nope' });

    expect(await g.submit(`${KEY}\n`)).toBe(true);
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra.status).toBe(200);
    expect(((await ra.json()) as { data: unknown[] }).data).toHaveLength(1);
    expect(rb.status).toBe(200);
    expect(store.getItem(API_KEY_STORAGE)).toBe(KEY);
    expect(g.state).toMatchObject({ open: false, error: null, hasKey: true, generation: 1, volatile: false });
    expect(opens).toBe(1);
    // Retries carry the new key; the key is never part of a URL.
    expect(srv.seen.slice(-2).map((x) => x.auth)).toEqual([`Bearer ${KEY}`, `Bearer ${KEY}`]);
    for (const x of srv.seen) expect(x.url).not.toContain('nope');
    for (const x of srv.seen) expect(decodeURIComponent(x.url)).not.toContain(KEY);
  });

  it('cancel hands back the 401 and stops prompting until asked; manage then takes a key', async () => {
    const store = memStore();
    const srv = keyedServer(() => KEY);
    const g = new AuthGate({ fetchImpl: srv.fetch, store: () => store });
    const p = g.fetch('/v1/models');
    await when(g, (s) => s.open);
    g.cancel();
    const res = await p;
    expect(res.status).toBe(401);
    expect(((await res.json()) as typeof UNAUTHORIZED).error.code).toBe('invalid_api_key');
    expect(g.state).toMatchObject({ open: false, declined: true });
    // Declined: a later request fails at once instead of opening the prompt again.
    expect((await g.fetch('/v1/memory')).status).toBe(401);
    expect(g.state.open).toBe(false);
    g.manage();
    expect(g.state).toMatchObject({ open: true, mode: 'needed' });
    expect(await g.submit(KEY)).toBe(true);
    expect(g.state.declined).toBe(false);
    expect((await g.fetch('/v1/memory')).status).toBe(200);
  });

  it('says so when the stored key is refused (the server key changed)', async () => {
    const store = memStore();
    saveApiKey('old-key', store);
    const srv = keyedServer(() => KEY);
    const g = new AuthGate({ fetchImpl: srv.fetch, store: () => store });
    const p = g.fetch('/v1/models');
    expect((await when(g, (s) => s.open)).staleKey).toBe(true);
    await g.submit(KEY);
    expect((await p).status).toBe(200);
    expect(srv.seen.map((x) => x.auth)).toEqual(['Bearer old-key', `Bearer ${KEY}`, `Bearer ${KEY}`]);
  });

  it('retries with a key changed meanwhile (another tab) without prompting', async () => {
    const store = memStore();
    saveApiKey('old-key', store);
    const srv = keyedServer(() => KEY);
    const g = new AuthGate({
      fetchImpl: (async (input: RequestInfo | URL, init?: RequestInit) => {
        const r = await srv.fetch(input, init);
        if (r.status === 401) store.setItem(API_KEY_STORAGE, KEY);
        return r;
      }) as typeof fetch,
      store: () => store,
    });
    expect((await g.fetch('/v1/models')).status).toBe(200);
    expect(g.state.open).toBe(false);
    expect(srv.seen.map((x) => x.auth)).toEqual(['Bearer old-key', `Bearer ${KEY}`]);
  });

  it('a request aborted while it waits for the key rejects with AbortError and is not retried', async () => {
    const store = memStore();
    const srv = keyedServer(() => KEY);
    const g = new AuthGate({ fetchImpl: srv.fetch, store: () => store });
    const ctl = new AbortController();
    const p = g.fetch('/v1/memory', { signal: ctl.signal });
    await when(g, (s) => s.open);
    ctl.abort();
    await expect(p).rejects.toMatchObject({ name: 'AbortError' });
    await g.submit(KEY);
    expect(srv.seen.filter((x) => x.url === '/v1/memory')).toHaveLength(1);
  });

  it('cannot reach the server: says so and stores nothing', async () => {
    const store = memStore();
    const g = new AuthGate({
      fetchImpl: (async () => {
        throw new TypeError('Failed to fetch');
      }) as typeof fetch,
      store: () => store,
    });
    g.manage();
    expect(await g.submit(KEY)).toBe(false);
    expect(g.state.error).toBe('Could not reach the server to check the key: Failed to fetch');
    expect(store.length).toBe(0);
    expect(await g.submit('   ')).toBe(false);
    expect(g.state.error).toMatch(/Enter the key/);
  });

  it('keeps the key in memory when storage refuses it, and forget drops it', async () => {
    const store = memStore(true);
    const srv = keyedServer(() => KEY);
    const g = new AuthGate({ fetchImpl: srv.fetch, store: () => store });
    g.manage();
    expect(await g.submit(KEY)).toBe(true);
    expect(g.state.volatile).toBe(true);
    expect((await g.fetch('/v1/memory')).status).toBe(200);
    g.forget();
    expect(g.state).toMatchObject({ hasKey: false, generation: 2 });
    expect(g.key()).toBeNull();
    const p = g.fetch('/v1/memory');
    await when(g, (s) => s.open);
    expect(srv.seen.at(-1)?.auth).toBeNull();
    g.cancel();
    expect((await p).status).toBe(401);
  });
});

describe('every client goes through the page gate', () => {
  let srv: ReturnType<typeof keyedServer>;
  beforeEach(() => {
    localStorage.clear();
    saveApiKey(KEY);
  });
  afterEach(() => {
    gate.forget();
    localStorage.clear();
    vi.unstubAllGlobals();
  });

  it('a refused request reads as how to give the key, keeping the server\'s code', async () => {
    srv = keyedServer(() => 'other');
    vi.stubGlobal('fetch', srv.fetch);
    const p = listModels();
    await when(gate, (s) => s.open);
    gate.cancel();
    await expect(p).rejects.toMatchObject({ message: KEY_REFUSED, status: 401, code: 'invalid_api_key' });
  });

  it('models, memory and the chat stream carry the stored key', async () => {
    srv = keyedServer(
      () => KEY,
      (path) =>
        path === '/v1/chat/completions'
          ? new Response('data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n', { headers: { 'content-type': 'text/event-stream' } })
          : okFor(path),
    );
    vi.stubGlobal('fetch', srv.fetch);
    expect((await listModels()).map((m) => m.id)).toEqual(['small-chat']);
    expect((await getMemory()).device).toBe('cpu');
    const r = await streamChat({ model: 'small-chat', messages: [{ role: 'user', content: 'x' }], signal: new AbortController().signal });
    expect(r.text).toBe('hi');
    expect(srv.seen.map((x) => [x.url, x.auth])).toEqual([
      ['/v1/models', `Bearer ${KEY}`],
      ['/v1/memory', `Bearer ${KEY}`],
      ['/v1/chat/completions', `Bearer ${KEY}`],
    ]);
  });

  it('MCP requests (initialize, tools/list, resources/read) carry the key; a refused key reads as the server\'s message', async () => {
    const mcpAnswer = (_path: string, init?: RequestInit) => {
      const body = JSON.parse(String(init?.body)) as { id?: number; method: string };
      if (body.id === undefined) return new Response(null, { status: 202 });
      const result =
        body.method === 'tools/list'
          ? { tools: [{ name: 'generate_image' }] }
          : body.method === 'resources/read'
            ? { contents: [{ uri: 'favlo://media/j1', mimeType: 'image/png', blob: 'iVBORw0KGgo=' }] }
            : { protocolVersion: '2025-11-25', capabilities: {} };
      return Response.json({ jsonrpc: '2.0', id: body.id, result }, { headers: { 'mcp-session-id': 's-1' } });
    };
    let serverKey = KEY;
    srv = keyedServer(() => serverKey, mcpAnswer);
    vi.stubGlobal('fetch', srv.fetch);
    const client = new McpClient();
    expect((await client.listTools()).map((t) => t.name)).toEqual(['generate_image']);
    expect((await client.readResource('favlo://media/j1')).mimeType).toBe('image/png');
    expect(srv.seen.length).toBe(4);
    for (const x of srv.seen) expect(x).toEqual({ url: '/mcp', auth: `Bearer ${KEY}` });

    // The server now wants another key and the user cancels the prompt.
    serverKey = 'other';
    const p = client.listTools();
    await when(gate, (s) => s.open);
    gate.cancel();
    await expect(p).rejects.toThrow(`${KEY_REFUSED} (HTTP 401)`);
    // Other HTTP-level refusals keep the server's own text.
    serverKey = KEY;
    vi.stubGlobal('fetch', async () => Response.json({ error: { message: 'request body too large' } }, { status: 413 }));
    await expect(client.listTools()).rejects.toThrow('request body too large (HTTP 413)');
  });
});
