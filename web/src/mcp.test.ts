import { describe, expect, it } from 'vitest';
import { McpClient, McpUnavailable, replyFromBody } from './mcp';

describe('replyFromBody', () => {
  it('finds the reply by id in a JSON body or batch', () => {
    expect(replyFromBody('application/json', '{"jsonrpc":"2.0","id":3,"result":{"ok":true}}', 3)).toEqual({
      jsonrpc: '2.0',
      id: 3,
      result: { ok: true },
    });
    expect(replyFromBody('application/json', '[{"id":1,"result":1},{"id":2,"result":2}]', 2)?.result).toBe(2);
    expect(replyFromBody('application/json', '{"id":1,"result":1}', 2)).toBeNull();
    expect(replyFromBody('application/json', 'oops', 1)).toBeNull();
  });

  it('finds the reply among SSE events, skipping notifications', () => {
    const body =
      'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n' +
      'event: message\ndata: {"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no such method"}}';
    expect(replyFromBody('text/event-stream', body, 1)?.error).toEqual({ code: -32601, message: 'no such method' });
  });
});

describe('McpClient', () => {
  it('reports a server with no /mcp route as unavailable', async () => {
    const c = new McpClient('/mcp', (async () => new Response('', { status: 404 })) as typeof fetch);
    await expect(c.initialize()).rejects.toBeInstanceOf(McpUnavailable);
  });

  it('initializes, keeps the session id and lists tools', async () => {
    const calls: { method?: string; session: string | null }[] = [];
    const f = (async (_u: unknown, init?: RequestInit) => {
      const body = JSON.parse(String(init?.body)) as { id?: number; method: string };
      const headers = new Headers(init?.headers);
      calls.push({ method: body.method, session: headers.get('mcp-session-id') });
      if (body.method === 'initialize')
        return new Response(JSON.stringify({ jsonrpc: '2.0', id: body.id, result: { protocolVersion: '2025-06-18' } }), {
          headers: { 'content-type': 'application/json', 'mcp-session-id': 's-1' },
        });
      if (body.method === 'tools/list')
        return new Response(`data: ${JSON.stringify({ jsonrpc: '2.0', id: body.id, result: { tools: [{ name: 'generate_image' }] } })}\n\n`, {
          headers: { 'content-type': 'text/event-stream' },
        });
      return new Response(null, { status: 202 });
    }) as typeof fetch;
    const c = new McpClient('/mcp', f);
    await c.initialize();
    expect(await c.listTools()).toEqual([{ name: 'generate_image' }]);
    expect(calls).toEqual([
      { method: 'initialize', session: null },
      { method: 'notifications/initialized', session: 's-1' },
      { method: 'tools/list', session: 's-1' },
    ]);
  });
});
