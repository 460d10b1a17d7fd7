import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { render } from 'preact';
import { StudioView } from './views/studio';
import { JobCard, describeArgs, type JobView } from './components/job-card';
import { parseJobRecord, type JobRecord } from './jobs';
import { fakeServer, type FakeJob } from './testing/fake-mcp';
import toolsList from './testing/tools-list.json';

const MODELS = [
  { id: 'smollm2-135m-instruct', kind: 'chat', pulled: true, resident: false },
  { id: 'dcgan-faces', kind: 'image', pulled: true, resident: false },
  { id: 'dcgan-faces-walk', kind: 'video', pulled: true, resident: false },
  { id: 'piper-joe-medium', kind: 'voice', pulled: true, resident: false },
];
const PNG = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3]).toString('base64');
const WAV = Buffer.from('RIFF\x24\x00\x00\x00WAVEfmt ', 'latin1').toString('base64');

const rec = (id: string, kind: string, status: string, stage: number, stages: number | null, more: Record<string, unknown> = {}) => ({
  id,
  kind,
  model: kind === 'image' ? 'dcgan-faces' : kind === 'video' ? 'dcgan-faces-walk' : 'piper-joe-medium',
  status,
  progress: { stage, stages },
  paused: false,
  preemptions: 0,
  error: null,
  resource: status === 'completed' ? `favlo://${kind === 'voice' ? 'voice' : `${kind}s`}/${id}` : null,
  seed: 42,
  ...more,
});

let root: HTMLDivElement;
beforeEach(() => {
  localStorage.clear();
  root = document.createElement('div');
  document.body.appendChild(root);
});
afterEach(() => {
  render(null, root);
  root.remove();
  vi.unstubAllGlobals();
});

function serve(jobs: FakeJob[], tools: { name: string; inputSchema?: unknown }[] = toolsList.tools) {
  const srv = fakeServer({ tools, models: MODELS, jobs });
  vi.stubGlobal('fetch', srv.fetch);
  return srv;
}
const $ = <T extends Element = HTMLElement>(sel: string) => root.querySelector<T>(sel);
const type = (sel: string, value: string) => {
  const el = $<HTMLInputElement>(sel);
  if (!el) throw new Error(`no ${sel}`);
  el.value = value;
  el.dispatchEvent(new Event('input', { bubbles: true }));
};
const button = (name: string) => {
  const b = Array.from(root.querySelectorAll('button')).find((x) => x.getAttribute('aria-label') === name);
  if (!b) throw new Error(`no button ${name}`);
  return b;
};
const card = (id: string) => $(`[data-testid="job"][data-id="${id}"]`);

describe('StudioView with a fake favlo /mcp', () => {
  it('offers a form for each generate tool the server lists, and music only when listed', async () => {
    serve([]);
    render(<StudioView pollMs={1} />, root);
    await vi.waitFor(() => expect($('[role="radiogroup"]')).not.toBeNull());
    const kinds = () => Array.from(root.querySelectorAll('.kind-option label')).map((l) => l.textContent);
    expect(kinds()).toEqual(['Image', 'Video', 'Speech']);
    expect($('[data-testid="studio-status"]')?.textContent).toContain('5 MCP tools');
    expect($<HTMLInputElement>('#generate_image-n')?.value).toBe('1');
    expect($('label[for="generate_image-n"]')?.textContent).toBe('Images 1–8');
    expect($<HTMLSelectElement>('#generate_image-model')?.value).toBe('dcgan-faces');

    render(null, root);
    const music = { name: 'generate_music', inputSchema: { type: 'object', properties: { prompt: { type: 'string' }, seconds: { type: 'integer', minimum: 1, maximum: 30, default: 8 } } } };
    serve([], [...toolsList.tools, music]);
    render(<StudioView pollMs={1} />, root);
    await vi.waitFor(() => expect(kinds()).toEqual(['Image', 'Video', 'Speech', 'Music']));
    $<HTMLInputElement>('#kind-music')?.click();
    await vi.waitFor(() => expect($<HTMLInputElement>('#generate_music-seconds')?.value).toBe('8'));
    expect($('#generate_music-model option')?.textContent).toBe('none pulled');
    expect(button('Generate music').disabled).toBe(true);
  });

  it('starts an image job, follows it to completed and shows the image with a download link', async () => {
    const srv = serve([
      {
        tool: 'generate_image',
        records: [rec('img-1', 'image', 'queued', 0, null), rec('img-1', 'image', 'in_progress', 2, 5), rec('img-1', 'image', 'completed', 5, 5)],
        mimeType: 'image/png',
        blob: PNG,
      },
    ]);
    render(<StudioView pollMs={1} />, root);
    await vi.waitFor(() => expect($('#generate_image-n')).not.toBeNull());
    type('#generate_image-n', '4');
    type('#generate_image-prompt', 'a face');
    button('Generate image').click();
    await vi.waitFor(() => expect(card('img-1')?.getAttribute('data-status')).toBe('completed'));
    await vi.waitFor(() => expect(card('img-1')?.querySelector('img')).not.toBeNull());
    const img = card('img-1')?.querySelector('img');
    expect(img?.getAttribute('alt')).toBe('Generated image img-1');
    expect(img?.getAttribute('src')).toMatch(/^blob:/);
    const a = card('img-1')?.querySelector<HTMLAnchorElement>('a.download');
    expect(a?.getAttribute('download')).toBe('img-1.png');
    expect(a?.getAttribute('href')).toBe(img?.getAttribute('src'));
    expect(card('img-1')?.querySelector('[data-testid="job-line"]')?.textContent).toBe('done, 5 stages');
    expect(card('img-1')?.querySelector('.job-prompt')?.textContent).toBe('“a face”');
    const call = srv.calls.find((c) => c.method === 'tools/call' && c.params?.name === 'generate_image');
    expect(call?.params?.arguments).toEqual({ prompt: 'a face', n: 4, response_format: 'png', model: 'dcgan-faces' });
    expect(srv.calls.filter((c) => c.method === 'resources/read').map((c) => c.params?.uri)).toEqual(['favlo://images/img-1']);
    expect(srv.violations).toEqual([]);

    // After a reload the job is listed again and its result read again.
    render(null, root);
    render(<StudioView pollMs={1} />, root);
    await vi.waitFor(() => expect(card('img-1')?.querySelector('img')?.getAttribute('src')).toMatch(/^blob:/));
    expect(srv.calls.filter((c) => c.method === 'resources/read').length).toBe(2);
    button('Remove job img-1 from the list').click();
    await vi.waitFor(() => expect(card('img-1')).toBeNull());
    expect(localStorage.getItem('favlo.studio.v1')).toBe('[]');
  });

  it('shows a video job paused by a chat with its stage, then cancels it', async () => {
    const srv = serve([
      {
        tool: 'generate_video',
        records: [
          rec('vid-1', 'video', 'in_progress', 3, 30),
          rec('vid-1', 'video', 'in_progress', 12, 30, { paused: true, preemptions: 1, pause_latency_ms: 91 }),
        ],
      },
    ]);
    render(<StudioView pollMs={1} />, root);
    await vi.waitFor(() => expect($('#kind-video')).not.toBeNull());
    $<HTMLInputElement>('#kind-video')?.click();
    await vi.waitFor(() => expect($('#generate_video-seconds')).not.toBeNull());
    type('#generate_video-seconds', '10');
    type('#generate_video-fps', '24');
    button('Generate video').click();
    await vi.waitFor(() => expect(card('vid-1')?.getAttribute('data-paused')).toBe('true'));
    const c = card('vid-1');
    expect(c?.querySelector('[data-testid="job-state"]')?.textContent).toBe('paused');
    expect(c?.querySelector('[data-testid="job-line"]')?.textContent).toBe('paused by a chat at stage 12 of 30; resumes by itself');
    expect(c?.querySelector('[data-testid="job-preemptions"]')?.textContent).toBe('preempted 1× by chat (paused after 91 ms)');
    expect(c?.querySelector('[role="progressbar"]')?.getAttribute('aria-valuetext')).toBe('stage 12 of 30');
    expect(c?.getAttribute('aria-label')).toBe('Video job vid-1, paused');
    expect($('[data-testid="studio-announce"]')?.textContent).toBe('video job vid-1: paused, paused by a chat at stage 12 of 30; resumes by itself');
    expect(srv.calls.find((x) => x.params?.name === 'generate_video')?.params?.arguments).toEqual({
      seconds: 10,
      fps: 24,
      response_format: 'mp4',
      model: 'dcgan-faces-walk',
    });
    button('Cancel job vid-1').click();
    await vi.waitFor(() => expect(card('vid-1')?.getAttribute('data-status')).toBe('cancelled'));
    expect(srv.cancelled).toEqual(['vid-1']);
    expect(card('vid-1')?.querySelector('button.stop')).toBeNull();
  });

  it('checks the form against the schema before calling, and shows server errors', async () => {
    const srv = serve([]);
    render(<StudioView pollMs={1} />, root);
    await vi.waitFor(() => expect($('#kind-video')).not.toBeNull());
    $<HTMLInputElement>('#kind-video')?.click();
    await vi.waitFor(() => expect($('#generate_video-seconds')).not.toBeNull());
    type('#generate_video-seconds', '11');
    button('Generate video').click();
    await vi.waitFor(() => expect($('[role="alert"]')?.textContent).toBe('Seconds must be at most 10'));
    expect($('#generate_video-seconds')?.getAttribute('aria-invalid')).toBe('true');
    expect(srv.calls.some((c) => c.method === 'tools/call')).toBe(false);
    // The fake rejects a generate call it has no job for, as the server does a bad argument.
    type('#generate_video-seconds', '3');
    button('Generate video').click();
    await vi.waitFor(() => expect($('[role="alert"]')?.textContent).toBe('Could not start the job: seconds must be at most 10 (seconds)'));
  });

  it('plays speech in an audio player', async () => {
    serve([{ tool: 'generate_speech', records: [rec('voc-1', 'voice', 'completed', 4, 4)], mimeType: 'audio/wav', blob: WAV }]);
    render(<StudioView pollMs={1} />, root);
    await vi.waitFor(() => expect($('#kind-voice')).not.toBeNull());
    $<HTMLInputElement>('#kind-voice')?.click();
    await vi.waitFor(() => expect($('#generate_speech-text')).not.toBeNull());
    type('#generate_speech-text', 'Hello there.');
    // Enter in the text box submits, as in the chat composer.
    $('#generate_speech-text')?.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    await vi.waitFor(() => expect(card('voc-1')?.querySelector('audio')?.getAttribute('src')).toMatch(/^blob:/));
    expect(card('voc-1')?.querySelector('audio')?.getAttribute('aria-label')).toBe('Speech voc-1');
    expect(card('voc-1')?.querySelector('a.download')?.getAttribute('download')).toBe('voc-1.wav');
  });
});

describe('JobCard', () => {
  const view = (r: Record<string, unknown>, more: Partial<JobView> = {}): JobView => ({
    id: String(r.id),
    tool: 'generate_video',
    args: { seconds: 10, fps: 24, response_format: 'mp4' },
    record: parseJobRecord(r) as JobRecord,
    result: null,
    resultError: null,
    cancelling: false,
    ...more,
  });

  it('shows a failed job with its error and no cancel', () => {
    render(
      <JobCard
        job={view(rec('vid-2', 'video', 'failed', 7, 30, { error: { message: 'device lost', type: 'server_error' } }))}
        onCancel={() => undefined}
        onRemove={() => undefined}
      />,
      root,
    );
    expect($('[data-testid="job-state"]')?.textContent).toBe('failed');
    expect($('[data-testid="job-line"]')?.textContent).toBe('server_error: device lost');
    expect($('[role="progressbar"]')).toBeNull();
    expect($('button.stop')).toBeNull();
    expect($('.job-meta')?.textContent).toBe('dcgan-faces-walk · 10 s · 24 fps · mp4 · seed 42');
  });

  it('shows an indeterminate bar before the stage count is known, and the video player when done', () => {
    render(<JobCard job={view(rec('vid-3', 'video', 'in_progress', 0, null))} onCancel={() => undefined} onRemove={() => undefined} />, root);
    expect($('[role="progressbar"] .fill')?.classList.contains('indeterminate')).toBe(true);
    expect($('[role="progressbar"]')?.getAttribute('aria-valuetext')).toBe('stage 0');
    render(
      <JobCard
        job={view(rec('vid-3', 'video', 'completed', 30, 30), { result: { url: 'blob:x', mimeType: 'video/mp4', name: 'vid-3.mp4' } })}
        onCancel={() => undefined}
        onRemove={() => undefined}
      />,
      root,
    );
    expect($('video')?.getAttribute('src')).toBe('blob:x');
    expect($('video')?.hasAttribute('controls')).toBe(true);
    render(
      <JobCard
        job={view(rec('vid-4', 'video', 'completed', 30, 30), { result: { url: 'blob:y', mimeType: 'video/x-msvideo', name: 'vid-4.avi' } })}
        onCancel={() => undefined}
        onRemove={() => undefined}
      />,
      root,
    );
    expect($('video')).toBeNull();
    expect($('a.download')?.getAttribute('download')).toBe('vid-4.avi');
    expect(describeArgs({ n: 4, response_format: 'png' })).toBe('4 images · png');
    expect(describeArgs({ text: 'x', speed: 1 })).toBe('');
  });
});
