import { describe, expect, it } from 'vitest';
import { McpClient, McpError, McpUnavailable, replyFromBody } from './mcp';
import { fakeServer } from './testing/fake-mcp';
import toolsList from './testing/tools-list.json';

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
        return new Response(JSON.stringify({ jsonrpc: '2.0', id: body.id, result: { protocolVersion: '2025-11-25' } }), {
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

describe('McpClient task flow (against a fake favlo /mcp)', () => {
  const RECORD = { id: 'img-1', kind: 'image', model: 'dcgan-faces', status: 'completed', progress: { stage: 5, stages: 5 }, resource: 'favlo://images/img-1' };
  const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]).toString('base64');

  it('skips the empty priming event rmcp sends before the reply', () => {
    const body = 'data: \nid: 0\nretry: 3000\n\ndata: {"jsonrpc":"2.0","id":7,"result":{"ok":1}}\nid: 1\n\n';
    expect(replyFromBody('text/event-stream', body, 7)?.result).toEqual({ ok: 1 });
  });

  it('advertises tasks, sends session and version headers, starts a task, reads status and the blob', async () => {
    const srv = fakeServer({ tools: toolsList.tools, jobs: [{ tool: 'generate_image', records: [RECORD], mimeType: 'image/png', blob: PNG }] });
    const c = new McpClient('/mcp', srv.fetch);
    const tools = await c.listTools();
    expect(tools.map((t) => t.name)).toEqual(['generate_image', 'generate_video', 'generate_speech', 'media_status', 'media_cancel']);
    const task = await c.startTask('generate_image', { n: 4 });
    expect(task).toEqual({ resultType: 'task', taskId: 'img-1', status: 'working', pollIntervalMs: 2000 });
    expect(await c.structured('media_status', { id: 'img-1' })).toMatchObject({ id: 'img-1', status: 'completed' });
    expect(await c.readResource('favlo://images/img-1')).toEqual({ uri: 'favlo://images/img-1', mimeType: 'image/png', blob: PNG });
    expect(srv.violations).toEqual([]);
    expect(srv.calls.map((x) => [x.method, x.session])).toEqual([
      ['initialize', null],
      ['notifications/initialized', 's-1'],
      ['tools/list', 's-1'],
      ['tools/call', 's-1'],
      ['tools/call', 's-1'],
      ['resources/read', 's-1'],
    ]);
    expect(srv.calls[3].params).toEqual({ name: 'generate_image', arguments: { n: 4 } });
  });

  it('opens a new session once when the server forgot the old one', async () => {
    const srv = fakeServer({ tools: toolsList.tools, jobs: [] });
    const c = new McpClient('/mcp', srv.fetch);
    await c.listTools();
    srv.dropSessions();
    expect((await c.listTools()).length).toBe(5);
    expect(srv.calls.filter((x) => x.method === 'initialize').length).toBe(2);
    expect(srv.calls.at(-1)?.session).toBe('s-2');
  });

  it('surfaces invalid params with the parameter name, and a missing resource', async () => {
    const srv = fakeServer({ tools: toolsList.tools, jobs: [] });
    const c = new McpClient('/mcp', srv.fetch);
    const err = await c.startTask('generate_video', { seconds: 11 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(McpError);
    expect(err).toMatchObject({ code: -32602, data: { param: 'seconds' } });
    await expect(c.readResource('favlo://images/gone')).rejects.toMatchObject({ code: -32002 });
  });

  it('refuses an inline (non-task) result from startTask with its error text', async () => {
    const f = (async (_u: unknown, init?: RequestInit) => {
      const body = JSON.parse(String(init?.body)) as { id?: number; method: string };
      const result =
        body.method === 'tools/call' ? { content: [{ type: 'text', text: 'job failed: no model' }], isError: true } : { tools: [] };
      return new Response(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }), { headers: { 'content-type': 'application/json' } });
    }) as typeof fetch;
    const c = new McpClient('/mcp', f);
    await expect(c.startTask('generate_image', {})).rejects.toThrow('job failed: no model');
  });
});
