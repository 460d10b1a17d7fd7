import { describe, expect, it } from 'vitest';
import { JOBS_KEY, MAX_JOBS, loadJobs, parseJobs, saveJobs, type StoredJob } from './studio-storage';
import { parseJobRecord, type JobRecord } from './jobs';

class MemStore {
  data = new Map<string, string>();
  refuse = false;
  get length() {
    return this.data.size;
  }
  clear() {
    this.data.clear();
  }
  key(i: number) {
    return [...this.data.keys()][i] ?? null;
  }
  getItem(k: string) {
    return this.data.get(k) ?? null;
  }
  setItem(k: string, v: string) {
    if (this.refuse) throw new DOMException('quota', 'QuotaExceededError');
    this.data.set(k, v);
  }
  removeItem(k: string) {
    this.data.delete(k);
  }
}

const record = parseJobRecord({
  id: 'vid-9',
  kind: 'video',
  model: 'dcgan-faces-walk',
  status: 'in_progress',
  paused: true,
  progress: { stage: 3, stages: 30 },
  preemptions: 2,
  pause_latency_ms: 40,
  resume_ms: 12,
  error: null,
  resource: null,
  seed: 99,
}) as JobRecord;

describe('studio storage', () => {
  it('round-trips jobs with their arguments and last record', () => {
    const s = new MemStore();
    const jobs: StoredJob[] = [{ id: 'vid-9', tool: 'generate_video', args: { seconds: 10, fps: 24 }, record }];
    expect(saveJobs(jobs, s)).toBe(true);
    expect(loadJobs(s)).toEqual(jobs);
    // Stored in the server's field names.
    expect(JSON.parse(s.getItem(JOBS_KEY) ?? '')[0].record.progress).toEqual({ stage: 3, stages: 30 });
  });

  it('drops malformed entries and caps the list', () => {
    const good = { id: 'vid-9', tool: 'generate_video', args: {}, record: { id: 'vid-9', status: 'queued' } };
    const text = JSON.stringify([
      good,
      { ...good, id: 'other' },
      { ...good, args: [] },
      { ...good, record: { id: 'vid-9', status: 'nope' } },
      { tool: 'x' },
      42,
    ]);
    expect(parseJobs(text).map((j) => j.id)).toEqual(['vid-9']);
    expect(parseJobs('{')).toEqual([]);
    expect(parseJobs('{"a":1}')).toEqual([]);
    expect(parseJobs(null)).toEqual([]);
    const many = Array.from({ length: MAX_JOBS + 5 }, (_, i) => ({ ...good, id: `j${i}`, record: { id: `j${i}`, status: 'queued' } }));
    expect(parseJobs(JSON.stringify(many)).length).toBe(MAX_JOBS);
  });

  it('reports a refused write instead of throwing', () => {
    const s = new MemStore();
    s.refuse = true;
    expect(saveJobs([], s)).toBe(false);
  });
});
