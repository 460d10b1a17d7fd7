import { describe, expect, it } from 'vitest';
import { formatBytes, percent, tokensPerSecond } from './format';

describe('format', () => {
  it('formats bytes in binary units', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1023)).toBe('1023 B');
    expect(formatBytes(1536)).toBe('1.50 KiB');
    expect(formatBytes(269591808)).toBe('257 MiB');
    expect(formatBytes(22636909824)).toBe('21.1 GiB');
    expect(formatBytes(-1)).toBe('–');
  });

  it('clamps percentages and survives a zero whole', () => {
    expect(percent(1, 4)).toBe(25);
    expect(percent(5, 4)).toBe(100);
    expect(percent(1, 0)).toBe(0);
  });

  it('measures tokens/s between first and last token', () => {
    expect(tokensPerSecond(11, 1000, 2000)).toBeCloseTo(10, 12);
    expect(tokensPerSecond(1, 1000, 1000)).toBeNull();
    expect(tokensPerSecond(5, null, 2000)).toBeNull();
  });
});
