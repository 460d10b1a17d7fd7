import { describe, expect, it } from 'vitest';
import {
  base64ToBytes,
  describeJob,
  describePreemptions,
  downloadName,
  formatProgress,
  isTerminal,
  mediaShape,
  parseJobRecord,
  pollJob,
  progressFraction,
  stateLabel,
  type JobRecord,
} from './jobs';
import { McpClient } from './mcp';
import { fakeServer } from './testing/fake-mcp';

// A record as the server's media_status returns it (captured from favlo serve, paused added).
const SERVER_RECORD = {
  id: 'vid-1a22b5525c1-0002',
  kind: 'video',
  model: 'dcgan-faces-walk',
  status: 'in_progress',
  progress: { stage: 12, stages: 30 },
  created_at: 1796023330,
  updated_at: 1796023331,
  paused: true,
  preemptions: 1,
  pause_latency_ms: 91,
  error: null,
  resource: null,
  size: '64x64',
  seconds: 10.0,
  response_format: 'mp4',
  seed: 8169888331367907,
};

const rec = (over: Partial<JobRecord>): JobRecord => ({ ...(parseJobRecord(SERVER_RECORD) as JobRecord), ...over });

describe('parseJobRecord', () => {
  it('reads the server record field by field', () => {
    expect(parseJobRecord(SERVER_RECORD)).toEqual({
      id: 'vid-1a22b5525c1-0002',
      kind: 'video',
      model: 'dcgan-faces-walk',
      status: 'in_progress',
      paused: true,
      stage: 12,
      stages: 30,
      preemptions: 1,
      pauseLatencyMs: 91,
      resumeMs: null,
      error: null,
      resource: null,
      seed: 8169888331367907,
    });
  });

  it('defaults what an older server leaves out and rejects non-records', () => {
    const { paused: _p, preemptions: _q, ...older } = SERVER_RECORD;
    const r = parseJobRecord({ ...older, progress: { stage: 0, stages: null } });
    expect(r?.paused).toBe(false);
    expect(r?.preemptions).toBe(0);
    expect(r?.stages).toBeNull();
    expect(parseJobRecord({ ...SERVER_RECORD, status: 'running' })).toBeNull();
    expect(parseJobRecord({ status: 'queued' })).toBeNull();
    expect(parseJobRecord('vid-1')).toBeNull();
    expect(parseJobRecord(null)).toBeNull();
    expect(parseJobRecord({ ...SERVER_RECORD, status: 'failed', error: { message: 'out of memory', type: 'server_error' } })?.error).toEqual({
      message: 'out of memory',
      type: 'server_error',
    });
  });
});

describe('job labels', () => {
  it('says stage i of n, or stage i while n is unknown', () => {
    expect(formatProgress({ stage: 12, stages: 30 })).toBe('stage 12 of 30');
    expect(formatProgress({ stage: 0, stages: null })).toBe('stage 0');
    expect(progressFraction({ stage: 12, stages: 30, status: 'in_progress' })).toBeCloseTo(0.4, 12);
    expect(progressFraction({ stage: 0, stages: null, status: 'in_progress' })).toBeNull();
    expect(progressFraction({ stage: 0, stages: null, status: 'completed' })).toBe(1);
    expect(progressFraction({ stage: 40, stages: 30, status: 'in_progress' })).toBe(1);
  });

  it('shows paused while the record says so, and only while the job is live', () => {
    expect(stateLabel(rec({}))).toBe('paused');
    expect(stateLabel(rec({ paused: false }))).toBe('running');
    expect(stateLabel(rec({ paused: true, status: 'completed' }))).toBe('completed');
    expect(stateLabel(rec({ paused: false, status: 'queued' }))).toBe('queued');
    expect(describeJob(rec({}))).toBe('paused by a chat at stage 12 of 30; resumes by itself');
    expect(describeJob(rec({ paused: false }))).toBe('stage 12 of 30');
  });

  it('describes every status', () => {
    expect(describeJob(rec({ status: 'queued', paused: false }))).toBe('waiting for the device');
    expect(describeJob(rec({ status: 'completed', stage: 30 }))).toBe('done, 30 stages');
    expect(describeJob(rec({ status: 'failed', error: { message: 'boom', type: 'server_error' } }))).toBe('server_error: boom');
    expect(describeJob(rec({ status: 'failed', error: null }))).toBe('failed');
    expect(describeJob(rec({ status: 'cancelled' }))).toBe('cancelled');
    expect(['queued', 'in_progress', 'completed', 'failed', 'cancelled'].map((s) => isTerminal({ status: s as JobRecord['status'] }))).toEqual([
      false,
      false,
      true,
      true,
      true,
    ]);
  });

  it('reports preemptions with the pause and resume figures', () => {
    expect(describePreemptions(rec({ preemptions: 0 }))).toBeNull();
    expect(describePreemptions(rec({}))).toBe('preempted 1× by chat (paused after 91 ms)');
    expect(describePreemptions(rec({ preemptions: 2, resumeMs: 63 }))).toBe('preempted 2× by chat (paused after 91 ms, resumed in 63 ms)');
    expect(describePreemptions(rec({ pauseLatencyMs: null }))).toBe('preempted 1× by chat');
  });
});

describe('results', () => {
  it('names downloads by id and the MIME type of the blob', () => {
    expect(downloadName('img-1', 'image/png')).toBe('img-1.png');
    expect(downloadName('vid-1', 'video/mp4')).toBe('vid-1.mp4');
    expect(downloadName('vid-1', 'video/x-msvideo')).toBe('vid-1.avi');
    expect(downloadName('voc-1', 'audio/wav')).toBe('voc-1.wav');
    expect(downloadName('voc-1', 'audio/flac')).toBe('voc-1.flac');
    expect(downloadName('x', 'application/json')).toBe('x.bin');
    expect(['image/png', 'video/mp4', 'video/x-msvideo', 'audio/flac'].map(mediaShape)).toEqual(['image', 'video', 'file', 'audio']);
  });

  it('decodes base64 to the same bytes as Node', () => {
    let x = 0x2545f491;
    const bytes = Uint8Array.from({ length: 1031 }, () => {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      return x & 0xff;
    });
    const b64 = Buffer.from(bytes).toString('base64');
    expect(Array.from(base64ToBytes(b64))).toEqual(Array.from(Buffer.from(b64, 'base64')));
    expect(Array.from(base64ToBytes(''))).toEqual([]);
  });
});

describe('pollJob', () => {
  const records = [
    { ...SERVER_RECORD, status: 'queued', paused: false, progress: { stage: 0, stages: null } },
    { ...SERVER_RECORD, paused: false, progress: { stage: 4, stages: 30 } },
    { ...SERVER_RECORD, paused: false, progress: { stage: 4, stages: 30 } },
    { ...SERVER_RECORD, paused: true, progress: { stage: 5, stages: 30 } },
    { ...SERVER_RECORD, paused: false, progress: { stage: 30, stages: 30 }, status: 'completed', resource: 'favlo://videos/vid-1a22b5525c1-0002' },
  ];

  it('reports each changed record until the job ends', async () => {
    const srv = fakeServer({ tools: [], jobs: [{ tool: 'generate_video', records }] });
    const c = new McpClient('/mcp', srv.fetch);
    const task = await c.startTask('generate_video', { seconds: 10, fps: 24 });
    expect(task).toMatchObject({ taskId: SERVER_RECORD.id, status: 'working' });
    const seen: string[] = [];
    const waits: number[] = [];
    const last = await pollJob(c, task.taskId, (r) => seen.push(`${stateLabel(r)} ${formatProgress(r)}`), {
      intervalMs: 7,
      sleep: async (ms) => void waits.push(ms),
    });
    expect(seen).toEqual(['queued stage 0', 'running stage 4 of 30', 'paused stage 5 of 30', 'completed stage 30 of 30']);
    expect(waits).toEqual([7, 7, 7, 7]);
    expect(last.resource).toBe('favlo://videos/vid-1a22b5525c1-0002');
    expect(srv.violations).toEqual([]);
  });

  it('rides out dropped connections but not a server error', async () => {
    const srv = fakeServer({ tools: [], jobs: [{ tool: 'generate_video', records: records.slice(3) }] });
    let drops = 2;
    const flaky = (async (u: unknown, init?: RequestInit) => {
      const body = String(init?.body ?? '');
      if (body.includes('media_status') && drops-- > 0) throw new TypeError('Failed to fetch');
      return srv.fetch(u as string, init);
    }) as typeof fetch;
    const c = new McpClient('/mcp', flaky);
    const { taskId } = await c.startTask('generate_video', {});
    const seen: string[] = [];
    const last = await pollJob(c, taskId, (r) => seen.push(stateLabel(r)), { sleep: async () => undefined });
    expect(seen).toEqual(['paused', 'completed']);
    expect(last.status).toBe('completed');
    expect(drops).toBe(-2); // two dropped, then two answered

    drops = 5;
    await expect(pollJob(c, taskId, () => undefined, { sleep: async () => undefined, retries: 3 })).rejects.toThrow('Failed to fetch');
    await expect(pollJob(c, 'vid-unknown', () => undefined, { sleep: async () => undefined })).rejects.toMatchObject({ code: -32602 });
  });

  it('stops when aborted', async () => {
    const srv = fakeServer({ tools: [], jobs: [{ tool: 'generate_video', records: records.slice(0, 2) }] });
    const c = new McpClient('/mcp', srv.fetch);
    const { taskId } = await c.startTask('generate_video', {});
    const ctl = new AbortController();
    let n = 0;
    const p = pollJob(c, taskId, () => ++n === 2 && ctl.abort(), { signal: ctl.signal, intervalMs: 1 });
    await expect(p).rejects.toMatchObject({ name: 'AbortError' });
    expect(n).toBe(2);
  });
});
