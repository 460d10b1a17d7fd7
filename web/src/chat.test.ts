import { describe, expect, it } from 'vitest';
import { streamChat, type StreamProgress } from './chat';

const enc = new TextEncoder();

function chunk(content: string | null, finish: string | null = null): string {
  const delta = content === null ? {} : { content };
  return `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
}

/** A fetch that answers with `parts` as the body, each part one read. */
function fakeFetch(parts: string[], status = 200, seen: { body?: unknown } = {}): typeof fetch {
  return (async (_url: unknown, init?: RequestInit) => {
    seen.body = JSON.parse(String(init?.body));
    const signal = init?.signal;
    let i = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(ctl) {
        if (signal?.aborted) {
          ctl.error(new DOMException('aborted', 'AbortError'));
          return;
        }
        if (i < parts.length) ctl.enqueue(enc.encode(parts[i++]));
        else ctl.close();
      },
    });
    return new Response(body, { status, headers: { 'content-type': 'text/event-stream' } });
  }) as typeof fetch;
}

function clock(step: number): () => number {
  let t = 0;
  return () => (t += step);
}

describe('streamChat', () => {
  it('joins deltas split across reads, counts tokens and reports tokens/s', async () => {
    const whole =
      `data: ${JSON.stringify({ choices: [{ delta: { role: 'assistant', content: '' }, finish_reason: null }] })}\n\n` +
      chunk('Hel') +
      chunk('lo') +
      chunk(', wor') +
      chunk('ld') +
      chunk(null, 'stop') +
      `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 9, completion_tokens: 4 } })}\n\n` +
      'data: [DONE]\n\n';
    // Split at awkward places: inside JSON, inside the blank line.
    const parts = [whole.slice(0, 30), whole.slice(30, 131), whole.slice(131, 132), whole.slice(132)];
    const seen: { body?: unknown } = {};
    const progress: StreamProgress[] = [];
    const r = await streamChat({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      signal: new AbortController().signal,
      fetchImpl: fakeFetch(parts, 200, seen),
      now: clock(50),
      onProgress: (p) => progress.push(p),
    });
    expect(r.text).toBe('Hello, world');
    expect(r.tokens).toBe(4);
    expect(r.promptTokens).toBe(9);
    expect(r.finish).toBe('stop');
    expect(r.stopped).toBe(false);
    // 4 tokens, first at t=50 and last at t=200: 3 intervals in 150 ms = 20 tok/s.
    expect(r.tokensPerSecond).toBeCloseTo(20, 9);
    expect(progress.map((p) => p.text).filter((t, i, a) => a.indexOf(t) === i)).toEqual(['', 'Hel', 'Hello', 'Hello, wor', 'Hello, world']);
    expect(seen.body).toEqual({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('resolves with stopped and the text so far when aborted mid-stream', async () => {
    const ctl = new AbortController();
    const r = await streamChat({
      model: 'm',
      messages: [],
      signal: ctl.signal,
      fetchImpl: fakeFetch([chunk('one'), chunk(' two'), chunk(' three')]),
      onProgress: (p) => {
        if (p.text === 'one two') ctl.abort();
      },
    });
    expect(r.stopped).toBe(true);
    expect(r.text).toBe('one two');
  });

  it('throws the server message of an error status', async () => {
    const f = (async () =>
      new Response(JSON.stringify({ error: { message: 'model x is not pulled', code: 'model_not_pulled' } }), {
        status: 503,
      })) as typeof fetch;
    await expect(streamChat({ model: 'x', messages: [], signal: new AbortController().signal, fetchImpl: f })).rejects.toMatchObject({
      message: 'model x is not pulled',
      status: 503,
      code: 'model_not_pulled',
    });
  });

  it('throws an error event sent inside the stream', async () => {
    const parts = [chunk('a'), `data: ${JSON.stringify({ error: { message: 'out of memory', code: 'oom' } })}\n\n`, 'data: [DONE]\n\n'];
    await expect(
      streamChat({ model: 'm', messages: [], signal: new AbortController().signal, fetchImpl: fakeFetch(parts) }),
    ).rejects.toThrow('out of memory');
  });
});
