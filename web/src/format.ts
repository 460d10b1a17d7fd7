// Number formatting shared by the views.

/** Bytes in binary units, three significant figures. */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n) || n < 0) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  if (u === 0) return `${v} B`;
  return `${v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)} ${units[u]}`;
}

/** Share of `part` in `whole` as a 0..100 percentage, clamped. */
export function percent(part: number, whole: number): number {
  if (!(whole > 0)) return 0;
  return Math.max(0, Math.min(100, (part / whole) * 100));
}

/** Tokens per second between the first and last token, or null if too few. */
export function tokensPerSecond(tokens: number, firstMs: number | null, lastMs: number | null): number | null {
  if (firstMs === null || lastMs === null || tokens < 2 || lastMs <= firstMs) return null;
  return ((tokens - 1) * 1000) / (lastMs - firstMs);
}
