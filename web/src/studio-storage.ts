// The Studio's job list kept in the browser's localStorage.
//
// Key design choice: only what the server cannot tell again is stored (which
// jobs this browser started, with their tool and arguments) plus the last
// record seen; never media bytes. After a reload the Studio asks the server
// for each job's record and result again. Read-back is validated entry by
// entry, like the chat conversation.

import { parseJobRecord, type JobRecord } from './jobs';

export interface StoredJob {
  id: string;
  tool: string;
  args: Record<string, unknown>;
  record: JobRecord;
}

export const JOBS_KEY = 'favlo.studio.v1';
/** Older jobs beyond this many are dropped from the list (the files expire on the server anyway). */
export const MAX_JOBS = 24;

function toJob(v: unknown): StoredJob | null {
  if (typeof v !== 'object' || v === null) return null;
  const o = v as Record<string, unknown>;
  if (typeof o.id !== 'string' || typeof o.tool !== 'string') return null;
  if (typeof o.args !== 'object' || o.args === null || Array.isArray(o.args)) return null;
  const record = parseJobRecord(o.record);
  if (!record || record.id !== o.id) return null;
  return { id: o.id, tool: o.tool, args: o.args as Record<string, unknown>, record };
}

/** Raw records are stored in the server's field names, so they parse back the same way. */
function toRaw(r: JobRecord): Record<string, unknown> {
  return {
    id: r.id,
    kind: r.kind,
    model: r.model,
    status: r.status,
    paused: r.paused,
    progress: { stage: r.stage, stages: r.stages },
    preemptions: r.preemptions,
    pause_latency_ms: r.pauseLatencyMs,
    resume_ms: r.resumeMs,
    error: r.error,
    resource: r.resource,
    seed: r.seed,
  };
}

export function parseJobs(text: string | null): StoredJob[] {
  if (text === null) return [];
  try {
    const v = JSON.parse(text) as unknown;
    if (!Array.isArray(v)) return [];
    return v
      .map(toJob)
      .filter((j): j is StoredJob => j !== null)
      .slice(0, MAX_JOBS);
  } catch {
    return [];
  }
}

export function loadJobs(store: Storage | undefined = globalThis.localStorage): StoredJob[] {
  try {
    return parseJobs(store ? store.getItem(JOBS_KEY) : null);
  } catch {
    return [];
  }
}

/** Returns false when the browser refused the write. */
export function saveJobs(jobs: StoredJob[], store: Storage | undefined = globalThis.localStorage): boolean {
  try {
    if (!store) return false;
    const raw = jobs.slice(0, MAX_JOBS).map((j) => ({ ...j, record: toRaw(j.record) }));
    store.setItem(JOBS_KEY, JSON.stringify(raw));
    return true;
  } catch {
    return false;
  }
}
