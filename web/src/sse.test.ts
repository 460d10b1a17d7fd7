import { describe, expect, it } from 'vitest';
import { SseParser, type SseEvent } from './sse';

// A stream written out by hand with the events it must yield (per the
// WHATWG event-stream rules), used whole and split at every position.
const STREAM =
  ': keep-alive comment\r\n' +
  'data: {"a":1}\r\n\r\n' +
  'event: note\n' +
  'data: line one\n' +
  'data:line two\n' +
  'id: 7\n\n' +
  'data\r\r' +
  'data:  two spaces\n\n' +
  'data: [DONE]\n\n' +
  'data: unterminated';

const EXPECTED: SseEvent[] = [
  { event: 'message', data: '{"a":1}' },
  { event: 'note', data: 'line one\nline two', id: '7' },
  { event: 'message', data: '', id: '7' },
  { event: 'message', data: ' two spaces', id: '7' },
  { event: 'message', data: '[DONE]', id: '7' },
];

describe('SseParser', () => {
  it('parses a whole stream', () => {
    const p = new SseParser();
    expect(p.push(STREAM)).toEqual(EXPECTED);
    expect(p.end()).toEqual([]);
  });

  it('gives the same events for every split into two chunks', () => {
    for (let cut = 0; cut <= STREAM.length; cut++) {
      const p = new SseParser();
      const got = [...p.push(STREAM.slice(0, cut)), ...p.push(STREAM.slice(cut))];
      expect(got, `cut at ${cut}`).toEqual(EXPECTED);
    }
  });

  it('gives the same events fed one character at a time', () => {
    const p = new SseParser();
    const got: SseEvent[] = [];
    for (const c of STREAM) got.push(...p.push(c));
    expect(got).toEqual(EXPECTED);
  });

  it('ignores unknown fields and blank-line runs', () => {
    const p = new SseParser();
    expect(p.push('retry: 10\nfoo: bar\n\n\n\ndata: x\n\n')).toEqual([{ event: 'message', data: 'x' }]);
  });
});
