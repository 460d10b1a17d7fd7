// A minimal MCP client over streamable HTTP (JSON-RPC 2.0 at POST /mcp).
//
// Key design choice: it speaks only what the Studio needs (initialize with the
// tasks extension, tools/list, tools/call, resources/read) and accepts both
// reply shapes the transport allows, a JSON body or an SSE stream carrying the
// JSON-RPC response. It uses session mode (protocol 2025-11-25): the session
// id the server hands out on `initialize` goes with every later request, and a
// session the server no longer knows (404) is re-initialized once. A server
// with no /mcp route at all is reported as `McpUnavailable`, so the Studio can
// say so instead of pretending jobs exist. Requests go through the API key
// gate (src/auth.ts), so a server started with --api-key gets its key.

import { SseParser } from './sse';
import { apiFetch, KEY_REFUSED } from './auth';

export const MCP_PROTOCOL_VERSION = '2025-11-25';
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';

export class McpUnavailable extends Error {
  constructor(readonly status: number) {
    super(`this server has no MCP endpoint at /mcp (HTTP ${status})`);
    this.name = 'McpUnavailable';
  }
}

export class McpError extends Error {
  constructor(
    message: string,
    readonly code: number,
    readonly data?: unknown,
  ) {
    super(message);
    this.name = 'McpError';
  }
}

export interface McpTool {
  name: string;
  description?: string;
  inputSchema?: unknown;
}

/** What a task-mode `tools/call` answers at once. */
export interface TaskHandle {
  taskId: string;
  status: string;
  pollIntervalMs?: number;
}

/** A tool's own result (`tools/call` without a task, `media_status`, ...). */
export interface ToolResult {
  content?: unknown[];
  structuredContent?: unknown;
  isError?: boolean;
}

export interface ResourceBlob {
  uri: string;
  mimeType: string;
  /** base64 */
  blob: string;
}

interface RpcReply {
  id?: number | string | null;
  result?: unknown;
  error?: { code: number; message: string; data?: unknown };
}

/** Pull the JSON-RPC reply with `id` out of a JSON or SSE body. */
export function replyFromBody(contentType: string, text: string, id: number): RpcReply | null {
  const candidates: unknown[] = [];
  if (contentType.includes('text/event-stream')) {
    const p = new SseParser();
    for (const ev of p.push(`${text}\n\n`)) {
      try {
        candidates.push(JSON.parse(ev.data));
      } catch {
        /* a priming event with empty data, or not JSON */
      }
    }
  } else {
    try {
      const v = JSON.parse(text) as unknown;
      if (Array.isArray(v)) candidates.push(...v);
      else candidates.push(v);
    } catch {
      return null;
    }
  }
  for (const c of candidates) {
    if (typeof c === 'object' && c !== null && (c as RpcReply).id === id) return c as RpcReply;
  }
  return null;
}

function isTaskHandle(v: unknown): v is TaskHandle {
  const o = v as Record<string, unknown> | null;
  return typeof o === 'object' && o !== null && o.resultType === 'task' && typeof o.taskId === 'string';
}

export class McpClient {
  private session: string | null = null;
  private nextId = 1;
  private ready: Promise<unknown> | null = null;

  constructor(
    private readonly url = '/mcp',
    private readonly fetchImpl: typeof fetch = apiFetch,
  ) {}

  private async post(body: unknown, signal?: AbortSignal): Promise<Response> {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': MCP_PROTOCOL_VERSION,
    };
    if (this.session) headers['mcp-session-id'] = this.session;
    return this.fetchImpl(this.url, { method: 'POST', headers, body: JSON.stringify(body), signal });
  }

  private async rpc(method: string, params: unknown, signal?: AbortSignal): Promise<unknown> {
    const id = this.nextId++;
    const res = await this.post({ jsonrpc: '2.0', id, method, params }, signal);
    if (res.status === 404 || res.status === 405) throw new McpUnavailable(res.status);
    const sid = res.headers.get('mcp-session-id');
    if (sid) this.session = sid;
    const text = await res.text();
    const reply = replyFromBody(res.headers.get('content-type') ?? '', text, id);
    if (!reply) {
      // An HTTP-level refusal (401 without a key, 413, ...) carries the API's error body.
      const why = res.status === 401 ? KEY_REFUSED : res.ok ? null : httpErrorMessage(text);
      throw new McpError(why ? `${why} (HTTP ${res.status})` : `no JSON-RPC reply to ${method} (HTTP ${res.status})`, -32603);
    }
    if (reply.error) throw new McpError(reply.error.message, reply.error.code, reply.error.data);
    return reply.result;
  }

  /** A request inside the session; a session the server forgot is opened again once. */
  async request(method: string, params: unknown, signal?: AbortSignal): Promise<unknown> {
    if (!this.ready) await this.initialize(signal);
    else await this.ready;
    try {
      return await this.rpc(method, params, signal);
    } catch (e) {
      if (!(e instanceof McpUnavailable) || e.status !== 404 || !this.session) throw e;
      this.session = null;
      await this.initialize(signal);
      return this.rpc(method, params, signal);
    }
  }

  /** Open a session advertising the tasks extension (generate tools then answer with a task). */
  initialize(signal?: AbortSignal): Promise<unknown> {
    const run = async () => {
      this.session = null;
      const result = await this.rpc(
        'initialize',
        {
          protocolVersion: MCP_PROTOCOL_VERSION,
          capabilities: { extensions: { [TASKS_EXTENSION]: {} } },
          clientInfo: { name: 'favlo-web', version: '0.1.0' },
        },
        signal,
      );
      await this.post({ jsonrpc: '2.0', method: 'notifications/initialized' }, signal);
      return result;
    };
    const p = run();
    this.ready = p;
    p.catch(() => {
      if (this.ready === p) this.ready = null;
    });
    return p;
  }

  async listTools(signal?: AbortSignal): Promise<McpTool[]> {
    const r = (await this.request('tools/list', {}, signal)) as { tools?: McpTool[] };
    return Array.isArray(r?.tools) ? r.tools : [];
  }

  callTool(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<unknown> {
    return this.request('tools/call', { name, arguments: args }, signal);
  }

  /**
   * Start a generate tool as a task. The server answers at once with the
   * task id (the job id). A server that finished inline is an error here.
   */
  async startTask(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<TaskHandle> {
    const r = await this.callTool(name, args, signal);
    if (isTaskHandle(r)) return r;
    const t = r as ToolResult | null;
    const msg = t?.isError ? textOf(t) : '';
    throw new McpError(msg || `${name} did not start a task`, -32603);
  }

  /** A tool whose result is a record in `structuredContent` (media_status, media_cancel). */
  async structured(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<unknown> {
    const r = (await this.callTool(name, args, signal)) as ToolResult | null;
    if (r?.isError) throw new McpError(textOf(r) || `${name} failed`, -32603);
    if (r?.structuredContent === undefined) throw new McpError(`${name} returned no record`, -32603);
    return r.structuredContent;
  }

  async readResource(uri: string, signal?: AbortSignal): Promise<ResourceBlob> {
    const r = (await this.request('resources/read', { uri }, signal)) as { contents?: unknown[] };
    const c = (Array.isArray(r?.contents) ? r.contents[0] : null) as Record<string, unknown> | null;
    if (!c || typeof c.blob !== 'string') throw new McpError(`no binary contents for ${uri}`, -32603);
    const mimeType = typeof c.mimeType === 'string' ? c.mimeType : 'application/octet-stream';
    return { uri, mimeType, blob: c.blob };
  }
}

/** The `error.message` of an API error body (`{"error": {"message": ...}}`), if it is one. */
export function httpErrorMessage(text: string): string | null {
  try {
    const m = (JSON.parse(text) as { error?: { message?: unknown } } | null)?.error?.message;
    return typeof m === 'string' && m ? m : null;
  } catch {
    return null;
  }
}

/** The text parts of a tool result, joined. */
export function textOf(r: ToolResult): string {
  return (r.content ?? [])
    .map((c) => (c as { type?: string; text?: unknown }).type === 'text' ? String((c as { text?: unknown }).text ?? '') : '')
    .filter(Boolean)
    .join('\n');
}
