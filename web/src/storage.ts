// The conversation kept in the browser's localStorage.
//
// Key design choice: what is read back is validated field by field, so a
// corrupt, foreign or older entry yields an empty conversation instead of a
// broken page; writes that fail (quota, private mode) are reported, not thrown.

export type Role = 'user' | 'assistant' | 'system';

export interface MessageStats {
  tokens: number;
  tokensPerSecond: number | null;
  finish: string | null;
}

export interface ChatMessage {
  role: Role;
  content: string;
  stats?: MessageStats;
  error?: string;
}

export interface Conversation {
  model: string | null;
  messages: ChatMessage[];
}

export const STORAGE_KEY = 'favlo.chat.v1';

const ROLES: readonly string[] = ['user', 'assistant', 'system'];

function isStats(v: unknown): v is MessageStats {
  if (typeof v !== 'object' || v === null) return false;
  const s = v as Record<string, unknown>;
  return (
    typeof s.tokens === 'number' &&
    (s.tokensPerSecond === null || typeof s.tokensPerSecond === 'number') &&
    (s.finish === null || typeof s.finish === 'string')
  );
}

function toMessage(v: unknown): ChatMessage | null {
  if (typeof v !== 'object' || v === null) return null;
  const m = v as Record<string, unknown>;
  if (typeof m.role !== 'string' || !ROLES.includes(m.role) || typeof m.content !== 'string') return null;
  const out: ChatMessage = { role: m.role as Role, content: m.content };
  if (isStats(m.stats)) out.stats = m.stats;
  if (typeof m.error === 'string') out.error = m.error;
  return out;
}

export function emptyConversation(): Conversation {
  return { model: null, messages: [] };
}

/** Parse a stored value; anything malformed gives an empty conversation. */
export function parseConversation(text: string | null): Conversation {
  if (text === null) return emptyConversation();
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return emptyConversation();
  }
  if (typeof v !== 'object' || v === null) return emptyConversation();
  const o = v as Record<string, unknown>;
  if (!Array.isArray(o.messages)) return emptyConversation();
  const messages = o.messages.map(toMessage).filter((m): m is ChatMessage => m !== null);
  return { model: typeof o.model === 'string' ? o.model : null, messages };
}

export function loadConversation(store: Storage | undefined = globalThis.localStorage): Conversation {
  try {
    return parseConversation(store ? store.getItem(STORAGE_KEY) : null);
  } catch {
    return emptyConversation();
  }
}

/** Returns false when the browser refused the write. */
export function saveConversation(c: Conversation, store: Storage | undefined = globalThis.localStorage): boolean {
  try {
    if (!store) return false;
    store.setItem(STORAGE_KEY, JSON.stringify(c));
    return true;
  } catch {
    return false;
  }
}

export function clearConversation(store: Storage | undefined = globalThis.localStorage): void {
  try {
    store?.removeItem(STORAGE_KEY);
  } catch {
    /* nothing to clear */
  }
}
