// A minimal MCP client over streamable HTTP (JSON-RPC 2.0 at POST /mcp).
//
// Key design choice: it speaks only what the Studio needs (initialize,
// tools/list, tools/call) and accepts both reply shapes the transport allows,
// a JSON body or an SSE stream carrying the JSON-RPC response. A server with
// no /mcp route is reported as `McpUnavailable`, so the Studio can say so
// instead of pretending jobs exist.

import { SseParser } from './sse';

export const MCP_PROTOCOL_VERSION = '2025-06-18';

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

interface RpcReply {
  id?: number | string | null;
  result?: unknown;
  error?: { code: number; message: string };
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
        /* not JSON */
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

export class McpClient {
  private session: string | null = null;
  private nextId = 1;

  constructor(
    private readonly url = '/mcp',
    private readonly fetchImpl: typeof fetch = (...a) => fetch(...a),
  ) {}

  private async post(body: unknown, signal?: AbortSignal): Promise<Response> {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': MCP_PROTOCOL_VERSION,
    };
    if (this.session) headers['mcp-session-id'] = this.session;
    const res = await this.fetchImpl(this.url, { method: 'POST', headers, body: JSON.stringify(body), signal });
    if (res.status === 404 || res.status === 405) throw new McpUnavailable(res.status);
    return res;
  }

  async request(method: string, params: unknown, signal?: AbortSignal): Promise<unknown> {
    const id = this.nextId++;
    const res = await this.post({ jsonrpc: '2.0', id, method, params }, signal);
    const sid = res.headers.get('mcp-session-id');
    if (sid) this.session = sid;
    const text = await res.text();
    const reply = replyFromBody(res.headers.get('content-type') ?? '', text, id);
    if (!reply) throw new McpError(`no JSON-RPC reply to ${method} (HTTP ${res.status})`, -32603);
    if (reply.error) throw new McpError(reply.error.message, reply.error.code);
    return reply.result;
  }

  async initialize(signal?: AbortSignal): Promise<unknown> {
    const result = await this.request(
      'initialize',
      {
        protocolVersion: MCP_PROTOCOL_VERSION,
        capabilities: {},
        clientInfo: { name: 'favlo-web', version: '0.1.0' },
      },
      signal,
    );
    await this.post({ jsonrpc: '2.0', method: 'notifications/initialized' }, signal);
    return result;
  }

  async listTools(signal?: AbortSignal): Promise<McpTool[]> {
    const r = (await this.request('tools/list', {}, signal)) as { tools?: McpTool[] };
    return Array.isArray(r?.tools) ? r.tools : [];
  }

  callTool(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<unknown> {
    return this.request('tools/call', { name, arguments: args }, signal);
  }
}
