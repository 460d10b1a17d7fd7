import { describe, expect, it } from 'vitest';
import { loadConversation, parseConversation, saveConversation, STORAGE_KEY, type Conversation } from './storage';

class MemStore implements Storage {
  map = new Map<string, string>();
  failWrites = false;
  get length() {
    return this.map.size;
  }
  clear() {
    this.map.clear();
  }
  getItem(k: string) {
    return this.map.get(k) ?? null;
  }
  key(i: number) {
    return [...this.map.keys()][i] ?? null;
  }
  removeItem(k: string) {
    this.map.delete(k);
  }
  setItem(k: string, v: string) {
    if (this.failWrites) throw new DOMException('full', 'QuotaExceededError');
    this.map.set(k, v);
  }
}

const SAMPLE: Conversation = {
  model: 'smollm2-135m-instruct',
  messages: [
    { role: 'user', content: 'Hi <there> & "you"' },
    { role: 'assistant', content: '```js\nx\n```', stats: { tokens: 12, tokensPerSecond: 31.5, finish: 'stop' } },
    { role: 'assistant', content: '', error: 'model x is not pulled' },
  ],
};

describe('conversation storage', () => {
  it('round-trips a conversation', () => {
    const s = new MemStore();
    expect(saveConversation(SAMPLE, s)).toBe(true);
    expect(JSON.parse(s.getItem(STORAGE_KEY) as string)).toEqual(SAMPLE);
    expect(loadConversation(s)).toEqual(SAMPLE);
  });

  it('gives an empty conversation for nothing, bad JSON or a wrong shape', () => {
    const empty = { model: null, messages: [] };
    expect(parseConversation(null)).toEqual(empty);
    expect(parseConversation('{not json')).toEqual(empty);
    expect(parseConversation('[1,2]')).toEqual(empty);
    expect(parseConversation('{"model": 5, "messages": "no"}')).toEqual(empty);
  });

  it('drops malformed messages and bad stats but keeps the rest', () => {
    const text = JSON.stringify({
      model: 'm',
      messages: [
        { role: 'user', content: 'ok' },
        { role: 'hacker', content: 'bad role' },
        { role: 'user', content: 42 },
        null,
        { role: 'assistant', content: 'a', stats: { tokens: 'many' } },
      ],
    });
    expect(parseConversation(text)).toEqual({
      model: 'm',
      messages: [
        { role: 'user', content: 'ok' },
        { role: 'assistant', content: 'a' },
      ],
    });
  });

  it('reports a refused write instead of throwing', () => {
    const s = new MemStore();
    s.failWrites = true;
    expect(saveConversation(SAMPLE, s)).toBe(false);
    expect(loadConversation(s)).toEqual({ model: null, messages: [] });
  });
});
