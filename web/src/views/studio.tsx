// The Studio view: media models and (once the server has it) MCP jobs.
//
// Key design choice: it shows only what the server really offers. Media rows
// come from /v1/models; jobs go through the MCP endpoint at /mcp, which is
// probed, and when it is missing the view says so plainly instead of showing
// forms that could not run.
import { useEffect, useState } from 'preact/hooks';
import { listModels, MEDIA_KINDS, type ModelRow } from '../api';
import { McpClient, McpUnavailable, type McpTool } from '../mcp';

type Mcp = { state: 'probing' } | { state: 'absent'; why: string } | { state: 'ready'; tools: McpTool[] };

export function mediaRows(rows: ModelRow[]): ModelRow[] {
  return rows.filter((r) => MEDIA_KINDS.includes(r.kind));
}

export function StudioView() {
  const [rows, setRows] = useState<ModelRow[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [mcp, setMcp] = useState<Mcp>({ state: 'probing' });
  useEffect(() => {
    const ctl = new AbortController();
    listModels(ctl.signal)
      .then((r) => setRows(mediaRows(r)))
      .catch((e: Error) => setError(e.message));
    const client = new McpClient();
    client
      .initialize(ctl.signal)
      .then(() => client.listTools(ctl.signal))
      .then((tools) => setMcp({ state: 'ready', tools }))
      .catch((e: Error) => {
        if (e.name === 'AbortError') return;
        setMcp({ state: 'absent', why: e instanceof McpUnavailable ? e.message : `MCP failed: ${e.message}` });
      });
    return () => ctl.abort();
  }, []);

  if (error) return <p class="notice error" role="alert">Could not list models: {error}</p>;
  if (!rows) return <p class="notice">Listing media models…</p>;
  const pulled = rows.filter((r) => r.pulled);
  return (
    <div class="studio">
      <h2>Studio</h2>
      {pulled.length === 0 ? (
        <p class="notice big" role="status" data-testid="studio-status">
          No media models are served yet: /v1/models lists no pulled image, video, voice or music model.
        </p>
      ) : mcp.state === 'ready' ? (
        <p class="notice" role="status" data-testid="studio-status">
          The server offers {mcp.tools.length} MCP tool{mcp.tools.length === 1 ? '' : 's'}:{' '}
          {mcp.tools.map((t) => t.name).join(', ') || 'none'}. Job forms are not built into this UI yet.
        </p>
      ) : (
        <p class="notice big" role="status" data-testid="studio-status">
          {mcp.state === 'probing'
            ? 'Checking for media jobs at /mcp…'
            : `No media jobs are served yet: ${mcp.why}. Media models are pulled but cannot be run from here.`}
        </p>
      )}
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
