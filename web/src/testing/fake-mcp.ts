// A scripted stand-in for `favlo serve`'s /mcp and /v1/models, for unit tests.
//
// Key design choice: it answers the way the real server does on the wire
// (session id on initialize, SSE bodies with a priming event, task handles
// for generate tools, job records in `structuredContent`, base64 blobs from
// resources/read), and it checks what a well-behaved client must send: the
// session id and protocol version headers after initialize, and the tasks
// extension in the initialize capabilities. Each job plays a list of records
// in order, one per `media_status`, the last repeating.

export interface FakeJob {
  tool: string;
  records: Record<string, unknown>[];
  mimeType?: string;
  /** base64 */
  blob?: string;
}

export interface FakeCall {
  method: string;
  params?: Record<string, unknown>;
  session: string | null;
  version: string | null;
}

export interface FakeServer {
  fetch: typeof fetch;
  calls: FakeCall[];
  /** problems the fake saw in the client's requests */
  violations: string[];
  cancelled: string[];
  /** forget every session, as a restarted server would */
  dropSessions: () => void;
}

const sse = (v: unknown, status = 200) =>
  new Response(`data: \nid: 0\nretry: 3000\n\ndata: ${JSON.stringify(v)}\nid: 1\n\n`, {
    status,
    headers: { 'content-type': 'text/event-stream' },
  });

export function fakeServer(opts: { tools: { name: string; inputSchema?: unknown }[]; models?: unknown[]; jobs: FakeJob[] }): FakeServer {
  const calls: FakeCall[] = [];
  const violations: string[] = [];
  const cancelled: string[] = [];
  const sessions = new Set<string>();
  let nextSession = 1;
  let nextJob = 0;
  const queue = [...opts.jobs];
  const live = new Map<string, { job: FakeJob; step: number; cancelled: boolean }>();

  const record = (id: string) => {
    const j = live.get(id);
    if (!j) return null;
    if (j.cancelled) return { ...j.job.records[0], id, status: 'cancelled', paused: false };
    const r = j.job.records[Math.min(j.step, j.job.records.length - 1)];
    j.step++;
    return { ...r, id };
  };

  const mcp = (body: { id?: number; method: string; params?: Record<string, unknown> }, headers: Headers): Response => {
    const session = headers.get('mcp-session-id');
    calls.push({ method: body.method, params: body.params, session, version: headers.get('mcp-protocol-version') });
    const reply = (result: unknown) => sse({ jsonrpc: '2.0', id: body.id, result });
    const fail = (code: number, message: string, data?: unknown) => sse({ jsonrpc: '2.0', id: body.id, error: { code, message, data } });
    if (body.method === 'initialize') {
      const caps = (body.params?.capabilities ?? {}) as { extensions?: Record<string, unknown> };
      if (!caps.extensions?.['io.modelcontextprotocol/tasks']) violations.push('initialize without the tasks extension');
      if (body.params?.protocolVersion !== '2025-11-25') violations.push(`protocolVersion ${String(body.params?.protocolVersion)}`);
      const sid = `s-${nextSession++}`;
      sessions.add(sid);
      const res = reply({ protocolVersion: '2025-11-25', capabilities: { tools: {}, resources: {} } });
      res.headers.set('mcp-session-id', sid);
      return res;
    }
    if (!session || !sessions.has(session)) return new Response('session not found', { status: session ? 404 : 400 });
    if (headers.get('mcp-protocol-version') !== '2025-11-25') violations.push(`${body.method} without mcp-protocol-version`);
    if (body.method === 'notifications/initialized') return new Response(null, { status: 202 });
    if (body.method === 'tools/list') return reply({ tools: opts.tools });
    if (body.method === 'tools/call') {
      const name = String(body.params?.name);
      const args = (body.params?.arguments ?? {}) as Record<string, unknown>;
      if (name === 'media_status' || name === 'media_cancel') {
        const id = String(args.id);
        if (name === 'media_cancel') {
          const j = live.get(id);
          if (j) j.cancelled = true;
          cancelled.push(id);
        }
        const r = record(id);
        if (!r) return fail(-32602, `no job ${id}`, { param: 'id' });
        return reply({ content: [{ type: 'text', text: JSON.stringify(r) }], structuredContent: r, isError: false });
      }
      const i = queue.findIndex((j) => j.tool === name);
      if (i < 0) return fail(-32602, `seconds must be at most 10`, { param: 'seconds' });
      const job = queue.splice(i, 1)[0];
      const id = String(job.records[0].id ?? `job-${++nextJob}`);
      live.set(id, { job, step: 0, cancelled: false });
      return reply({ resultType: 'task', taskId: id, status: 'working', pollIntervalMs: 2000 });
    }
    if (body.method === 'resources/read') {
      const uri = String(body.params?.uri);
      for (const [id, j] of live) {
        if (uri.endsWith(`/${id}`) && j.job.blob)
          return reply({ contents: [{ uri, mimeType: j.job.mimeType, blob: j.job.blob }] });
      }
      return fail(-32002, `resource not found: ${uri}`);
    }
    return fail(-32601, `no method ${body.method}`);
  };

  const fetchImpl = (async (input: unknown, init?: RequestInit) => {
    const url = new URL(String(input), 'http://127.0.0.1');
    if (url.pathname === '/v1/models')
      return new Response(JSON.stringify({ data: opts.models ?? [] }), { headers: { 'content-type': 'application/json' } });
    if (url.pathname === '/mcp') {
      if (init?.signal?.aborted) throw new DOMException('aborted', 'AbortError');
      return mcp(JSON.parse(String(init?.body)), new Headers(init?.headers));
    }
    return new Response('', { status: 404 });
  }) as typeof fetch;

  return { fetch: fetchImpl, calls, violations, cancelled, dropSessions: () => sessions.clear() };
}
