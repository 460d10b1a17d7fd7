// Media job records (as `media_status` returns them) and how the Studio shows them.
//
// Key design choice: the server's record is the only truth. It is validated
// field by field into `JobRecord` (unknown or missing fields get safe
// defaults, so an older server without `paused` still works), and every label
// the UI shows is a pure function of it, tested without a browser.

import { McpError, type McpClient, type ResourceBlob } from './mcp';

export type JobStatus = 'queued' | 'in_progress' | 'completed' | 'failed' | 'cancelled';
const STATUSES: readonly string[] = ['queued', 'in_progress', 'completed', 'failed', 'cancelled'];

export interface JobRecord {
  id: string;
  kind: string;
  model: string;
  status: JobStatus;
  paused: boolean;
  stage: number;
  stages: number | null;
  preemptions: number;
  pauseLatencyMs: number | null;
  resumeMs: number | null;
  error: { message: string; type: string } | null;
  resource: string | null;
  seed: number | null;
}

const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** Validate a job record; null when it is not one. */
export function parseJobRecord(v: unknown): JobRecord | null {
  if (typeof v !== 'object' || v === null) return null;
  const o = v as Record<string, unknown>;
  if (typeof o.id !== 'string' || typeof o.status !== 'string' || !STATUSES.includes(o.status)) return null;
  const p = (typeof o.progress === 'object' && o.progress !== null ? o.progress : {}) as Record<string, unknown>;
  const e = o.error as Record<string, unknown> | null | undefined;
  return {
    id: o.id,
    kind: typeof o.kind === 'string' ? o.kind : 'media',
    model: typeof o.model === 'string' ? o.model : '',
    status: o.status as JobStatus,
    paused: o.paused === true,
    stage: num(p.stage) ?? 0,
    stages: num(p.stages),
    preemptions: num(o.preemptions) ?? 0,
    pauseLatencyMs: num(o.pause_latency_ms),
    resumeMs: num(o.resume_ms),
    error:
      typeof e === 'object' && e !== null
        ? { message: String(e.message ?? 'failed'), type: String(e.type ?? 'error') }
        : null,
    resource: typeof o.resource === 'string' ? o.resource : null,
    seed: num(o.seed),
  };
}

export function isTerminal(r: Pick<JobRecord, 'status'>): boolean {
  return r.status === 'completed' || r.status === 'failed' || r.status === 'cancelled';
}

/** "stage 3 of 30", or "stage 3" while the job does not know its stage count yet. */
export function formatProgress(r: Pick<JobRecord, 'stage' | 'stages'>): string {
  return r.stages ? `stage ${r.stage} of ${r.stages}` : `stage ${r.stage}`;
}

/** 0..1 when the stage count is known, else null (an indeterminate bar). */
export function progressFraction(r: Pick<JobRecord, 'stage' | 'stages' | 'status'>): number | null {
  if (r.status === 'completed') return 1;
  if (!r.stages) return null;
  return Math.max(0, Math.min(1, r.stage / r.stages));
}

/** Short state word for a badge: the record's status, with `paused` winning while set. */
export function stateLabel(r: Pick<JobRecord, 'status' | 'paused'>): string {
  if (r.paused && !isTerminal(r)) return 'paused';
  return r.status === 'in_progress' ? 'running' : r.status;
}

/** One line under the badge: where the job is, in words. */
export function describeJob(r: JobRecord): string {
  switch (r.status) {
    case 'queued':
      return 'waiting for the device';
    case 'in_progress':
      return r.paused ? `paused by a chat at ${formatProgress(r)}; resumes by itself` : formatProgress(r);
    case 'completed':
      return r.stages ? `done, ${r.stages} stages` : 'done';
    case 'failed':
      return r.error ? `${r.error.type}: ${r.error.message}` : 'failed';
    case 'cancelled':
      return 'cancelled';
  }
}

/** "paused 1× by chat (took 91 ms, resumed in 65 ms)", or null when never paused. */
export function describePreemptions(r: JobRecord): string | null {
  if (r.preemptions <= 0) return null;
  const parts: string[] = [];
  if (r.pauseLatencyMs !== null) parts.push(`paused after ${r.pauseLatencyMs} ms`);
  if (r.resumeMs !== null) parts.push(`resumed in ${r.resumeMs} ms`);
  return `preempted ${r.preemptions}× by chat${parts.length ? ` (${parts.join(', ')})` : ''}`;
}

const EXT: Record<string, string> = {
  'image/png': 'png',
  'video/mp4': 'mp4',
  'video/x-msvideo': 'avi',
  'audio/wav': 'wav',
  'audio/x-wav': 'wav',
  'audio/flac': 'flac',
};

/** The download name for a job's result: `<id>.<ext>`. */
export function downloadName(id: string, mimeType: string): string {
  return `${id}.${EXT[mimeType] ?? 'bin'}`;
}

/** How a result is shown: by the MIME type of the blob. */
export function mediaShape(mimeType: string): 'image' | 'video' | 'audio' | 'file' {
  if (mimeType.startsWith('image/')) return 'image';
  if (mimeType === 'video/mp4' || mimeType === 'video/webm') return 'video';
  if (mimeType.startsWith('audio/')) return 'audio';
  return 'file';
}

export function base64ToBytes(b64: string): Uint8Array<ArrayBuffer> {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function blobOf(r: ResourceBlob): Blob {
  return new Blob([base64ToBytes(r.blob)], { type: r.mimeType });
}

export interface PollOptions {
  intervalMs?: number;
  signal?: AbortSignal;
  /** Transport failures in a row (not server answers) tolerated before giving up; default 3. */
  retries?: number;
  /** Injected for tests; resolves after `ms` or rejects when `signal` aborts. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new DOMException('aborted', 'AbortError'));
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        reject(new DOMException('aborted', 'AbortError'));
      },
      { once: true },
    );
  });
}

export async function jobStatus(client: McpClient, id: string, signal?: AbortSignal): Promise<JobRecord> {
  const r = parseJobRecord(await client.structured('media_status', { id }, signal));
  if (!r) throw new Error(`media_status for ${id} returned no job record`);
  return r;
}

export async function cancelJob(client: McpClient, id: string, signal?: AbortSignal): Promise<JobRecord> {
  const r = parseJobRecord(await client.structured('media_cancel', { id }, signal));
  if (!r) throw new Error(`media_cancel for ${id} returned no job record`);
  return r;
}

/**
 * Poll `media_status` until the job ends, reporting every record that differs
 * from the last one. The local server is cheap to ask, so the default
 * interval (500 ms) is shorter than the task's advertised 2000 ms. A few
 * transport failures in a row are ridden out; a server error ends the poll.
 */
export async function pollJob(
  client: McpClient,
  id: string,
  onRecord: (r: JobRecord) => void,
  opts: PollOptions = {},
): Promise<JobRecord> {
  const wait = opts.sleep ?? sleep;
  let last = '';
  let failures = 0;
  for (;;) {
    let r: JobRecord;
    try {
      r = await jobStatus(client, id, opts.signal);
      failures = 0;
    } catch (e) {
      // A server answer (unknown job, bad id) is final; a dropped connection is retried.
      if ((e as Error).name === 'AbortError' || e instanceof McpError || ++failures > (opts.retries ?? 3)) throw e;
      await wait(opts.intervalMs ?? 500, opts.signal);
      continue;
    }
    const key = JSON.stringify(r);
    if (key !== last) {
      last = key;
      onRecord(r);
    }
    if (isTerminal(r)) return r;
    await wait(opts.intervalMs ?? 500, opts.signal);
  }
}
