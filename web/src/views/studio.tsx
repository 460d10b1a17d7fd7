// The Studio view: forms for the generate tools the server lists, a live job
// list, and the results.
//
// Key design choice: it shows only what the server really offers. Media rows
// come from /v1/models; jobs go through MCP at /mcp in task mode (the call
// returns the job id at once), each job is followed with `media_status`
// every 500 ms until it ends, and a finished job's file is read with
// `resources/read` into an object URL for the player and the download link.
// The list (ids, arguments, last record) survives reloads in localStorage;
// the view stays mounted while hidden so jobs keep updating during a chat.
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { listModels, MEDIA_KINDS, type ModelRow } from '../api';
import { gate } from '../auth';
import { useGate } from '../components/api-key';
import { McpClient, McpError, McpUnavailable, type McpTool } from '../mcp';
import { blobOf, cancelJob, describeJob, downloadName, isTerminal, pollJob, stateLabel, type JobRecord } from '../jobs';
import { GENERATE_TOOLS } from '../tool-form';
import { loadJobs, saveJobs, MAX_JOBS, type StoredJob } from '../studio-storage';
import { JobCard, type JobView } from '../components/job-card';
import { ToolForm } from '../components/tool-form';

type Mcp = { state: 'probing' } | { state: 'absent'; why: string } | { state: 'ready'; tools: McpTool[] };

export function mediaRows(rows: ModelRow[]): ModelRow[] {
  return rows.filter((r) => MEDIA_KINDS.includes(r.kind));
}

function fromStored(j: StoredJob): JobView {
  return { ...j, result: null, resultError: null, cancelling: false };
}

function toStored(j: JobView): StoredJob {
  return { id: j.id, tool: j.tool, args: j.args, record: j.record };
}

function queuedRecord(id: string, kind: string, model: string): JobRecord {
  return {
    id,
    kind,
    model,
    status: 'queued',
    paused: false,
    stage: 0,
    stages: null,
    preemptions: 0,
    pauseLatencyMs: null,
    resumeMs: null,
    error: null,
    resource: null,
    seed: null,
  };
}

function errorText(e: unknown): string {
  if (e instanceof McpError) {
    const param = (e.data as { param?: unknown } | undefined)?.param;
    return typeof param === 'string' ? `${e.message} (${param})` : e.message;
  }
  return (e as Error).message;
}

export function StudioView({ client: given, pollMs = 500 }: { client?: McpClient; pollMs?: number } = {}) {
  const client = useMemo(() => given ?? new McpClient(), [given]);
  const [rows, setRows] = useState<ModelRow[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [mcp, setMcp] = useState<Mcp>({ state: 'probing' });
  const [jobs, setJobs] = useState<JobView[]>(() => loadJobs().map(fromStored));
  const [picked, setPicked] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [formError, setFormError] = useState<string | null>(null);
  /** bumped by "Check again" to probe /v1/models and /mcp anew */
  const [probe, setProbe] = useState(0);
  /** bumped by the API key gate when the key changes: probe again with it */
  const { generation } = useGate(gate);
  const polls = useRef(new Map<string, AbortController>());
  const urls = useRef(new Map<string, string>());
  const jobsRef = useRef(jobs);
  jobsRef.current = jobs;

  // One polite announcement per change of a job's state word (not per stage), for screen readers.
  const [announcement, setAnnouncement] = useState('');
  const lastState = useRef(new Map<string, string>());
  const onRecord = useCallback((id: string, record: JobRecord) => {
    const state = stateLabel(record);
    if (lastState.current.get(id) !== state) {
      lastState.current.set(id, state);
      setAnnouncement(`${record.kind} job ${id}: ${state}, ${describeJob(record)}`);
    }
    setJobs((js) => js.map((j) => (j.id === id ? { ...j, record } : j)));
  }, []);

  const update = useCallback((id: string, fn: (j: JobView) => JobView) => {
    setJobs((js) => js.map((j) => (j.id === id ? fn(j) : j)));
  }, []);

  const readResult = useCallback(
    async (id: string, uri: string) => {
      const ctl = new AbortController();
      polls.current.set(`read:${id}`, ctl);
      try {
        const res = await client.readResource(uri, ctl.signal);
        const url = URL.createObjectURL(blobOf(res));
        urls.current.set(id, url);
        update(id, (j) => ({ ...j, result: { url, mimeType: res.mimeType, name: downloadName(id, res.mimeType) }, resultError: null }));
      } catch (e) {
        if ((e as Error).name === 'AbortError') return;
        update(id, (j) => ({ ...j, resultError: `Could not read ${uri}: ${errorText(e)}` }));
      } finally {
        polls.current.delete(`read:${id}`);
      }
    },
    [client, update],
  );

  const track = useCallback(
    (id: string) => {
      if (polls.current.has(id)) return;
      const ctl = new AbortController();
      polls.current.set(id, ctl);
      pollJob(client, id, (record) => onRecord(id, record), { signal: ctl.signal, intervalMs: pollMs })
        .then((final) => {
          polls.current.delete(id);
          if (final.status === 'completed' && final.resource) void readResult(id, final.resource);
        })
        .catch((e: Error) => {
          polls.current.delete(id);
          if (e.name === 'AbortError') return;
          update(id, (j) => ({ ...j, resultError: `Lost track of this job: ${errorText(e)}` }));
        });
    },
    [client, update, onRecord, readResult, pollMs],
  );

  useEffect(() => {
    const ctl = new AbortController();
    setError(null);
    setMcp({ state: 'probing' });
    listModels(ctl.signal)
      .then((r) => setRows(mediaRows(r)))
      .catch((e: Error) => {
        if (e.name !== 'AbortError') setError(e.message);
      });
    client
      .initialize(ctl.signal)
      .then(() => client.listTools(ctl.signal))
      .then((tools) => {
        setMcp({ state: 'ready', tools });
        // Jobs from before a reload: follow the running ones, fetch finished results.
        for (const j of jobsRef.current) {
          if (!isTerminal(j.record)) track(j.id);
          else if (j.record.status === 'completed' && j.record.resource && !j.result && !polls.current.has(`read:${j.id}`))
            void readResult(j.id, j.record.resource);
        }
      })
      .catch((e: Error) => {
        if (e.name === 'AbortError') return;
        setMcp({ state: 'absent', why: e instanceof McpUnavailable ? e.message : `MCP failed: ${e.message}` });
      });
    return () => ctl.abort();
  }, [client, track, readResult, probe, generation]);

  // On unmount: stop following jobs and free the media.
  useEffect(() => {
    const pollMap = polls.current;
    const urlMap = urls.current;
    return () => {
      for (const c of pollMap.values()) c.abort();
      pollMap.clear();
      for (const u of urlMap.values()) URL.revokeObjectURL(u);
      urlMap.clear();
    };
  }, []);

  useEffect(() => {
    saveJobs(jobs.map(toStored));
  }, [jobs]);

  const generate = useMemo(
    () => (mcp.state === 'ready' ? GENERATE_TOOLS.filter((g) => mcp.tools.some((t) => t.name === g.tool)) : []),
    [mcp],
  );
  const current = generate.find((g) => g.tool === picked) ?? generate[0] ?? null;
  const schema = mcp.state === 'ready' ? mcp.tools.find((t) => t.name === current?.tool)?.inputSchema : undefined;

  const start = async (args: Record<string, unknown>) => {
    if (!current) return;
    setBusy(true);
    setFormError(null);
    try {
      const task = await client.startTask(current.tool, args);
      const id = task.taskId;
      const job: JobView = {
        id,
        tool: current.tool,
        args,
        record: queuedRecord(id, current.kind, typeof args.model === 'string' ? args.model : ''),
        result: null,
        resultError: null,
        cancelling: false,
      };
      setJobs((js) => [job, ...js.filter((j) => j.id !== id)].slice(0, MAX_JOBS));
      track(id);
    } catch (e) {
      setFormError(`Could not start the job: ${errorText(e)}`);
    } finally {
      setBusy(false);
    }
  };

  const cancel = async (id: string) => {
    update(id, (j) => ({ ...j, cancelling: true }));
    try {
      const record = await cancelJob(client, id);
      update(id, (j) => ({ ...j, record, cancelling: false }));
    } catch (e) {
      update(id, (j) => ({ ...j, cancelling: false, resultError: `Cancel failed: ${errorText(e)}` }));
    }
  };

  const remove = (id: string) => {
    polls.current.get(id)?.abort();
    polls.current.get(`read:${id}`)?.abort();
    const url = urls.current.get(id);
    if (url) URL.revokeObjectURL(url);
    urls.current.delete(id);
    setJobs((js) => js.filter((j) => j.id !== id));
  };

  const again = (
    <button type="button" class="ghost" onClick={() => setProbe((n) => n + 1)}>
      Check again
    </button>
  );
  if (error)
    return (
      <div class="studio">
        <p class="notice error" role="alert">
          Could not list models: {error}
        </p>
        {again}
      </div>
    );
  if (!rows) return <p class="notice">Listing media models…</p>;
  const pulled = rows.filter((r) => r.pulled);
  return (
    <div class="studio">
      <h2>Studio</h2>
      {mcp.state === 'ready' ? (
        <p class="notice" role="status" data-testid="studio-status">
          {pulled.length === 0 && 'No media models are served yet: /v1/models lists no pulled image, video, voice or music model. '}
          The server offers {mcp.tools.length} MCP tool{mcp.tools.length === 1 ? '' : 's'} at /mcp:{' '}
          {mcp.tools.map((t) => t.name).join(', ') || 'none'}.
        </p>
      ) : pulled.length === 0 ? (
        <p class="notice big" role="status" data-testid="studio-status">
          No media models are served yet: /v1/models lists no pulled image, video, voice or music model.
        </p>
      ) : (
        <p class="notice big" role="status" data-testid="studio-status">
          {mcp.state === 'probing'
            ? 'Checking for media jobs at /mcp…'
            : `No media jobs are served yet: ${mcp.why}. Media models are pulled but cannot be run from here.`}
        </p>
      )}
      {mcp.state === 'absent' && again}
      {current && (
        <section class="new-job" aria-labelledby="studio-new">
          <h3 id="studio-new">New job</h3>
          <div class="kind-picker" role="radiogroup" aria-label="Kind of media">
            {generate.map((g) => (
              <span key={g.tool} class="kind-option">
                <input
                  type="radio"
                  id={`kind-${g.kind}`}
                  name="studio-kind"
                  class="sr-only"
                  value={g.tool}
                  checked={g.tool === current.tool}
                  onChange={() => {
                    setPicked(g.tool);
                    setFormError(null);
                  }}
                />
                <label for={`kind-${g.kind}`}>{g.title}</label>
              </span>
            ))}
          </div>
          <ToolForm
            key={current.tool}
            tool={current.tool}
            title={current.title}
            schema={schema}
            models={rows.filter((r) => r.kind === current.kind)}
            busy={busy}
            error={formError}
            onSubmit={(args) => void start(args)}
          />
        </section>
      )}
      {(mcp.state === 'ready' || jobs.length > 0) && (
        <section aria-labelledby="studio-jobs">
          <h3 id="studio-jobs">Jobs</h3>
          {jobs.length === 0 ? (
            <p class="empty">No jobs yet. A chat sent while a job runs pauses it; it resumes by itself.</p>
          ) : (
            <ul class="jobs" aria-labelledby="studio-jobs">
              {jobs.map((j) => (
                <JobCard key={j.id} job={j} onCancel={(id) => void cancel(id)} onRemove={remove} />
              ))}
            </ul>
          )}
        </section>
      )}
      <p class="sr-only" role="status" aria-live="polite" data-testid="studio-announce">
        {announcement}
      </p>
      <h3>Media models</h3>
      {rows.length === 0 ? (
        <p class="empty">This server lists no media models.</p>
      ) : (
        <table class="models" aria-label="Media models">
          <thead>
            <tr>
              <th scope="col">Model</th>
              <th scope="col">Kind</th>
              <th scope="col">State</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((r) => (
              <tr key={r.id}>
                <td>
                  <code>{r.id}</code>
                  {r.description && <div class="desc">{r.description}</div>}
                </td>
                <td>{r.kind}</td>
                <td>{r.pulled ? (r.resident ? 'pulled, resident' : 'pulled') : <span>not pulled — <code>favlo pull {r.id}</code></span>}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
