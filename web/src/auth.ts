// The API key of a `favlo serve --api-key <key>`: kept in localStorage, sent
// as `Authorization: Bearer <key>` on every request the UI makes, and asked
// for when the server answers 401.
//
// Key design choice: one gate for the whole page. Every request goes through
// `apiFetch`; a 401 parks the request on the gate, which opens a single prompt
// however many requests wait. The prompt checks a candidate key with
// GET /v1/models before storing it, then every parked request is sent again
// with the new key. Cancelling hands each parked request its own 401 and stops
// further prompts until the user asks for one (the header's key button). The
// key only ever travels in a header: never in a URL, never in a log line.

export const API_KEY_STORAGE = 'favlo.apikey.v1';

/** Where a candidate key is checked (a protected route every server has). */
export const VERIFY_PATH = '/v1/models';

/** What a request refused for want of a key says in the views (the server's own text is about headers). */
export const KEY_REFUSED =
  'This server needs an API key: enter it with the "API key" button at the top of the page.';

export function loadApiKey(store: Storage | undefined = globalThis.localStorage): string | null {
  try {
    const v = store?.getItem(API_KEY_STORAGE) ?? null;
    return v && keyProblem(v) === null ? v : null;
  } catch {
    return null;
  }
}

/** Returns false when the browser refused the write. */
export function saveApiKey(key: string, store: Storage | undefined = globalThis.localStorage): boolean {
  try {
    if (!store) return false;
    store.setItem(API_KEY_STORAGE, key);
    return true;
  } catch {
    return false;
  }
}

export function forgetApiKey(store: Storage | undefined = globalThis.localStorage): void {
  try {
    store?.removeItem(API_KEY_STORAGE);
  } catch {
    /* nothing stored */
  }
}

/** Why a key cannot be sent in a header, or null when it can. */
export function keyProblem(key: string): string | null {
  if (key.length === 0) return 'Enter the key the server was started with.';
  if (!/^[\x20-\x7e]+$/.test(key)) return 'A key is printable ASCII on one line; this one has other characters.';
  return null;
}

/** `init` with the Authorization header set (or unchanged when there is no key). */
export function withKey(init: RequestInit | undefined, key: string | null): RequestInit {
  if (key === null) return init ?? {};
  const headers = new Headers(init?.headers);
  headers.set('authorization', `Bearer ${key}`);
  return { ...init, headers };
}

export interface GateState {
  /** the prompt is shown */
  open: boolean;
  /** `needed`: a request got 401; `manage`: the user opened it to change or forget the key */
  mode: 'needed' | 'manage';
  /** the last submit's problem, shown in the prompt */
  error: string | null;
  /** a candidate key is being checked */
  checking: boolean;
  /** a key is stored (or kept in memory when storage refused it) */
  hasKey: boolean;
  /** the server has answered 401 at least once: it wants a key */
  needed: boolean;
  /** the prompt opened because the stored key was refused */
  staleKey: boolean;
  /** the key could not be stored and lives only until the page closes */
  volatile: boolean;
  /** the user cancelled the prompt; requests fail with their 401 until a key is given */
  declined: boolean;
  /** bumped whenever the key changes, so views can load again */
  generation: number;
}

type Waiter = (key: string | null) => void;

function abortError(): Error {
  return new DOMException('The operation was aborted.', 'AbortError');
}

function discard(res: Response): void {
  void res.body?.cancel().catch(() => undefined);
}

export interface GateOptions {
  fetchImpl?: typeof fetch;
  store?: () => Storage | undefined;
}

export class AuthGate {
  private readonly fetchImpl: typeof fetch;
  private readonly store: () => Storage | undefined;
  /** the key when storage refused it */
  private memoryKey: string | null = null;
  private waiters: Waiter[] = [];
  private listeners = new Set<(s: GateState) => void>();
  private s: GateState;

  constructor(o: GateOptions = {}) {
    this.fetchImpl = o.fetchImpl ?? ((...a) => globalThis.fetch(...a));
    this.store = o.store ?? (() => globalThis.localStorage);
    this.s = {
      open: false,
      mode: 'needed',
      error: null,
      checking: false,
      hasKey: this.key() !== null,
      needed: false,
      staleKey: false,
      volatile: false,
      declined: false,
      generation: 0,
    };
  }

  /** Follow a key stored or removed elsewhere (another tab, devtools). */
  private sync(): void {
    const has = this.key() !== null;
    if (has !== this.s.hasKey) this.set({ hasKey: has });
  }

  /** Listen for key changes made in other tabs (the page's gate does). */
  watchStorage(target: Pick<Window, 'addEventListener'> | undefined = globalThis.window): void {
    target?.addEventListener('storage', (e: StorageEvent) => {
      if (e.key === API_KEY_STORAGE || e.key === null) this.sync();
    });
  }

  get state(): GateState {
    return this.s;
  }

  subscribe(fn: (s: GateState) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private set(patch: Partial<GateState>): void {
    this.s = { ...this.s, ...patch };
    for (const fn of this.listeners) fn(this.s);
  }

  /** The key to send now: the stored one (another tab may have changed it), else the in-memory one. */
  key(): string | null {
    return loadApiKey(this.store()) ?? this.memoryKey;
  }

  /** `fetch` with the key; a 401 waits for a key from the prompt and is sent again with it. */
  async fetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
    this.sync();
    let sent = this.key();
    let res = await this.fetchImpl(input, withKey(init, sent));
    // Each pass uses a different key, so this ends when the user cancels or a key works.
    while (res.status === 401) {
      if (!this.s.needed) this.set({ needed: true });
      let next = this.key();
      if (next === null || next === sent) {
        next = await this.waitForKey(sent !== null, init?.signal ?? undefined);
        if (next === null || next === sent) return res;
      }
      discard(res);
      sent = next;
      res = await this.fetchImpl(input, withKey(init, sent));
    }
    return res;
  }

  private waitForKey(stale: boolean, signal?: AbortSignal): Promise<string | null> {
    if (signal?.aborted) return Promise.reject(abortError());
    if (this.s.declined) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      const waiter: Waiter = (k) => {
        signal?.removeEventListener('abort', onAbort);
        resolve(k);
      };
      const onAbort = () => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(abortError());
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
      if (!this.s.open || this.s.mode !== 'needed') {
        this.set({ open: true, mode: 'needed', error: null, staleKey: stale });
      }
    });
  }

  private release(key: string | null): void {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w(key);
  }

  /** Check a key against the server; store it and resume the waiting requests when it is accepted. */
  async submit(raw: string): Promise<boolean> {
    const key = raw.trim();
    const problem = keyProblem(key);
    if (problem) {
      this.set({ error: problem });
      return false;
    }
    this.set({ checking: true, error: null });
    let res: Response;
    try {
      res = await this.fetchImpl(VERIFY_PATH, withKey({ headers: { accept: 'application/json' } }, key));
    } catch (e) {
      this.set({ checking: false, error: `Could not reach the server to check the key: ${(e as Error).message}` });
      return false;
    }
    discard(res);
    if (res.status === 401) {
      this.set({ checking: false, error: 'The server rejected this key. Check it and try again.' });
      return false;
    }
    const stored = saveApiKey(key, this.store());
    this.memoryKey = stored ? null : key;
    this.set({
      open: false,
      checking: false,
      error: null,
      hasKey: true,
      staleKey: false,
      declined: false,
      volatile: !stored,
      generation: this.s.generation + 1,
    });
    this.release(key);
    return true;
  }

  /** Close the prompt; waiting requests get their 401 and no new prompt opens by itself. */
  cancel(): void {
    const waiting = this.waiters.length > 0 || this.s.mode === 'needed';
    this.set({ open: false, checking: false, error: null, declined: this.s.declined || waiting });
    this.release(null);
  }

  /** Open the prompt to change or forget the key. */
  manage(): void {
    if (this.s.open) return;
    this.sync();
    // With no key and a server that wants one, this is the same prompt a 401 opens.
    const mode = this.s.needed && !this.s.hasKey ? 'needed' : 'manage';
    this.set({ open: true, mode, error: null, staleKey: false });
  }

  /** Drop the key from this browser; the next protected request prompts again. */
  forget(): void {
    forgetApiKey(this.store());
    this.memoryKey = null;
    this.set({ open: false, error: null, hasKey: false, volatile: false, declined: false, generation: this.s.generation + 1 });
    this.release(null);
  }
}

/** The page's gate. */
export const gate = new AuthGate();
gate.watchStorage();

/** `fetch` through the page's gate: every UI request uses this. */
export const apiFetch: typeof fetch = (input, init) => gate.fetch(input, init);
