// One media job: state badge, progress (stage i of n), `paused` while a chat
// holds the device, preemption figures, the result (image, video or audio
// player from an object URL) with a download link, and cancel / remove.
//
// Key design choice: everything shown is derived from the server's job record
// through the pure helpers of jobs.ts; the card holds no state of its own.
import type { JobRecord } from '../jobs';
import { describeJob, describePreemptions, formatProgress, isTerminal, mediaShape, progressFraction, stateLabel } from '../jobs';

export interface JobResult {
  url: string;
  mimeType: string;
  name: string;
}

export interface JobView {
  id: string;
  tool: string;
  args: Record<string, unknown>;
  record: JobRecord;
  result: JobResult | null;
  /** why the result could not be read (expired, network) */
  resultError: string | null;
  /** a cancel request is in flight */
  cancelling: boolean;
}

const KIND_TITLE: Record<string, string> = { image: 'Image', video: 'Video', voice: 'Speech', music: 'Music' };

/** A one-line summary of the arguments the job was started with. */
export function describeArgs(args: Record<string, unknown>): string {
  const parts: string[] = [];
  if (typeof args.n === 'number' && args.n > 1) parts.push(`${args.n} images`);
  if (typeof args.seconds === 'number') parts.push(`${args.seconds} s`);
  if (typeof args.fps === 'number') parts.push(`${args.fps} fps`);
  if (typeof args.speed === 'number' && args.speed !== 1) parts.push(`speed ${args.speed}`);
  if (typeof args.response_format === 'string') parts.push(args.response_format);
  return parts.join(' · ');
}

function Result({ job }: { job: JobView }) {
  const r = job.result;
  if (!r) return null;
  const shape = mediaShape(r.mimeType);
  const label = `${KIND_TITLE[job.record.kind] ?? 'Result'} ${job.id}`;
  return (
    <div class={`result ${shape}`}>
      {shape === 'image' && <img src={r.url} alt={`Generated image ${job.id}`} />}
      {shape === 'video' && <video src={r.url} controls loop muted playsInline aria-label={label} />}
      {shape === 'audio' && <audio src={r.url} controls aria-label={label} />}
      {shape === 'file' && <p class="job-line">Browsers do not play {r.mimeType}; download it to watch.</p>}
      <a class="download" href={r.url} download={r.name}>
        Download <span class="fname">{r.name}</span>
      </a>
    </div>
  );
}

export function JobCard({ job, onCancel, onRemove }: { job: JobView; onCancel: (id: string) => void; onRemove: (id: string) => void }) {
  const rec = job.record;
  const state = stateLabel(rec);
  const frac = progressFraction(rec);
  const pre = describePreemptions(rec);
  const args = describeArgs(job.args);
  const prompt = typeof job.args.prompt === 'string' ? job.args.prompt : typeof job.args.text === 'string' ? job.args.text : '';
  const done = isTerminal(rec);
  return (
    <li
      class={`job ${state}`}
      data-testid="job"
      data-id={job.id}
      data-kind={rec.kind}
      data-status={rec.status}
      data-paused={rec.paused ? 'true' : 'false'}
      aria-label={`${KIND_TITLE[rec.kind] ?? rec.kind} job ${job.id}, ${state}`}
    >
      <div class="job-head">
        <span class="job-kind">{KIND_TITLE[rec.kind] ?? rec.kind}</span>
        <span class={`badge state ${state}`} data-testid="job-state">
          {state}
        </span>
        <code class="job-id">{job.id}</code>
      </div>
      {prompt && <div class="job-prompt">“{prompt}”</div>}
      <div class="job-meta">
        {[rec.model, args, rec.seed !== null ? `seed ${rec.seed}` : ''].filter(Boolean).join(' · ')}
      </div>
      {!done || rec.status === 'completed' ? (
        <div class="bar job-bar" role="progressbar" aria-label={`Progress of ${job.id}`} aria-valuemin={0} aria-valuemax={rec.stages ?? undefined} aria-valuenow={rec.stages ? rec.stage : undefined} aria-valuetext={rec.status === 'completed' ? 'done' : formatProgress(rec)}>
          <div class={`fill ${frac === null ? 'indeterminate' : state === 'paused' ? 'pending' : state === 'completed' ? 'room' : 'live'}`} style={{ width: `${((frac ?? 1) * 100).toFixed(1)}%` }} />
        </div>
      ) : null}
      <div class="job-line" data-testid="job-line">
        {describeJob(rec)}
      </div>
      {pre && (
        <div class="job-pre" data-testid="job-preemptions">
          {pre}
        </div>
      )}
      {job.resultError && (
        <p class="notice error" role="alert">
          {job.resultError}
        </p>
      )}
      {rec.status === 'completed' && !job.result && !job.resultError && <div class="job-line">Reading the result…</div>}
      <Result job={job} />
      <div class="job-actions">
        {!done && (
          <button type="button" class="stop" onClick={() => onCancel(job.id)} disabled={job.cancelling} aria-label={`Cancel job ${job.id}`}>
            {job.cancelling ? 'Cancelling…' : 'Cancel'}
          </button>
        )}
        {done && (
          <button type="button" class="ghost" onClick={() => onRemove(job.id)} aria-label={`Remove job ${job.id} from the list`}>
            Remove
          </button>
        )}
      </div>
    </li>
  );
}
