// Typed access to Favlo's public HTTP API (the same routes any client uses).
//
// Key design choice: the UI has no private endpoints; every call here is one
// of the documented `/v1/*` routes, and errors surface the server's own
// `error.message` text. Requests go through the API key gate (src/auth.ts),
// which adds `Authorization: Bearer` when a key is stored.

import { apiFetch, KEY_REFUSED } from './auth';

export type ModelKind = 'chat' | 'embeddings' | 'image' | 'video' | 'music' | 'voice' | string;

export interface ModelRow {
  id: string;
  kind: ModelKind;
  family?: string;
  pulled: boolean;
  resident: boolean;
  description?: string;
}

export interface OwnerRow {
  owner: string;
  bytes: number;
  spans: number;
  kinds: Record<string, number>;
}

/** One ledger's figures (the host's at the top level of GET /v1/memory, an accelerator's in `devices`). */
export interface LedgerFigures {
  device: string;
  budget: number;
  cap: number | null;
  live: number;
  pending: number;
  room: number;
  owners: OwnerRow[];
}

export interface MemoryLedger extends LedgerFigures {
  resident: string | null;
  embeddings: string | null;
  /** The ledgers of accelerators an open model holds (absent from older servers). */
  devices?: LedgerFigures[];
}

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null = null,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/**
 * The server's `{"error": {"message", "code"}}` body, or the status text. A
 * 401 (no key, or the prompt was cancelled) says how to give the key instead.
 */
export async function errorFrom(res: Response): Promise<ApiError> {
  let message = `${res.status} ${res.statusText}`.trim();
  let code: string | null = null;
  try {
    const body = (await res.json()) as { error?: { message?: unknown; code?: unknown } };
    if (typeof body.error?.message === 'string') message = body.error.message;
    if (typeof body.error?.code === 'string') code = body.error.code;
  } catch {
    /* not JSON */
  }
  if (res.status === 401) message = KEY_REFUSED;
  return new ApiError(message, res.status, code);
}

async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  const res = await apiFetch(path, { signal, headers: { accept: 'application/json' } });
  if (!res.ok) throw await errorFrom(res);
  return (await res.json()) as T;
}

export async function listModels(signal?: AbortSignal): Promise<ModelRow[]> {
  const body = await getJson<{ data?: ModelRow[] }>('/v1/models', signal);
  return Array.isArray(body.data) ? body.data : [];
}

export function getMemory(signal?: AbortSignal): Promise<MemoryLedger> {
  return getJson<MemoryLedger>('/v1/memory', signal);
}

export const MEDIA_KINDS: readonly string[] = ['image', 'video', 'voice', 'music'];
