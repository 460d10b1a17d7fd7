// Streaming chat completions: POST /v1/chat/completions with stream=true,
// read the SSE body as it arrives, and report each text delta.
//
// Key design choice: stopping is aborting the fetch. The server stops
// generating when the client disconnects, so there is no separate cancel call;
// an abort resolves (not rejects) with `stopped: true` and the text so far.

import { errorFrom, ApiError } from './api';
import { apiFetch } from './auth';
import { SseParser } from './sse';
import { tokensPerSecond } from './format';

export interface WireMessage {
  role: string;
  content: string;
}

export interface StreamProgress {
  text: string;
  tokens: number;
  tokensPerSecond: number | null;
}

export interface StreamResult extends StreamProgress {
  finish: string | null;
  stopped: boolean;
  promptTokens: number | null;
}

export interface StreamOptions {
  model: string;
  messages: WireMessage[];
  signal: AbortSignal;
  onProgress?: (p: StreamProgress) => void;
  fetchImpl?: typeof fetch;
  now?: () => number;
  maxTokens?: number;
}

interface Chunk {
  choices?: { delta?: { content?: string | null }; finish_reason?: string | null }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number };
  error?: { message?: string; code?: string };
}

function isAbort(e: unknown): boolean {
  return e instanceof DOMException ? e.name === 'AbortError' : (e as { name?: string })?.name === 'AbortError';
}

export async function streamChat(o: StreamOptions): Promise<StreamResult> {
  const doFetch = o.fetchImpl ?? apiFetch;
  const now = o.now ?? (() => performance.now());
  const body: Record<string, unknown> = {
    model: o.model,
    messages: o.messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  if (o.maxTokens !== undefined) body.max_tokens = o.maxTokens;
  const state: StreamResult = {
    text: '',
    tokens: 0,
    tokensPerSecond: null,
    finish: null,
    stopped: false,
    promptTokens: null,
  };
  let first: number | null = null;
  let last: number | null = null;
  let res: Response;
  try {
    res = await doFetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify(body),
      signal: o.signal,
    });
  } catch (e) {
    if (isAbort(e)) return { ...state, stopped: true };
    throw e;
  }
  if (!res.ok) throw await errorFrom(res);
  if (!res.body) throw new ApiError('the server sent no body', res.status);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      for (const ev of parser.push(value)) {
        // Text already buffered when the user stopped is not shown.
        if (o.signal.aborted) {
          void reader.cancel().catch(() => undefined);
          return { ...state, stopped: true };
        }
        if (ev.data === '[DONE]') continue;
        let chunk: Chunk;
        try {
          chunk = JSON.parse(ev.data) as Chunk;
        } catch {
          continue;
        }
        if (chunk.error) throw new ApiError(chunk.error.message ?? 'the stream failed', 200, chunk.error.code ?? null);
        if (chunk.usage) {
          if (typeof chunk.usage.completion_tokens === 'number') state.tokens = chunk.usage.completion_tokens;
          if (typeof chunk.usage.prompt_tokens === 'number') state.promptTokens = chunk.usage.prompt_tokens;
        }
        for (const choice of chunk.choices ?? []) {
          const piece = choice.delta?.content;
          if (typeof piece === 'string' && piece.length > 0) {
            const t = now();
            if (first === null) first = t;
            last = t;
            state.text += piece;
            state.tokens += 1;
          }
          if (choice.finish_reason) state.finish = choice.finish_reason;
        }
        state.tokensPerSecond = tokensPerSecond(state.tokens, first, last);
        o.onProgress?.({ text: state.text, tokens: state.tokens, tokensPerSecond: state.tokensPerSecond });
      }
    }
  } catch (e) {
    if (isAbort(e) || o.signal.aborted) return { ...state, stopped: true };
    throw e;
  } finally {
    reader.releaseLock();
  }
  return state;
}
