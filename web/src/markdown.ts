// A small Markdown renderer for model output, producing HTML text.
//
// Key design choice: every character of the source is HTML-escaped before any
// markup is added, and the only tags emitted are the fixed set written here,
// so model output can never inject its own HTML. Links keep only http(s) and
// mailto targets. An unterminated code fence (common mid-stream) still renders
// as a code block up to the end.

export function escapeHtml(s: string): string {
  return s
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

/** Inline spans: code, links, bold, italic. Input is raw text. */
export function renderInline(src: string): string {
  // Odd parts are code spans (`...`); their content is escaped, never marked up.
  return src
    .split(/(`[^`\n]+`)/g)
    .map((part, i) => (i % 2 === 1 ? `<code>${escapeHtml(part.slice(1, -1))}</code>` : emphasis(escapeHtml(part))))
    .join('');
}

/** Markup on already-escaped text (no `<` can be present here). */
function emphasis(s: string): string {
  return s
    .replace(/\[([^\]\n]+)\]\(([^)\s]+)\)/g, (whole, text: string, url: string) => {
      const raw = url.replace(/&amp;/g, '&');
      if (!SAFE_URL.test(raw)) return whole;
      return `<a href="${url}" target="_blank" rel="noopener noreferrer">${text}</a>`;
    })
    .replace(/\*\*(?=\S)([^*]*?\S)\*\*/g, '<strong>$1</strong>')
    .replace(/__(?=\S)([^_]*?\S)__/g, '<strong>$1</strong>')
    .replace(/(^|[^*\w])\*(?=\S)([^*\n]*?\S)\*(?!\*)/g, '$1<em>$2</em>')
    .replace(/(^|[^_\w])_(?=\S)([^_\n]*?\S)_(?![_\w])/g, '$1<em>$2</em>')
    .replace(/~~(?=\S)([^~]*?\S)~~/g, '<del>$1</del>');
}

const FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+#.-]*)\s*$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
const ORDERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;

/** Block structure: fences, headings, lists, quotes, rules, paragraphs. */
export function renderMarkdown(src: string): string {
  const lines = src.replace(/\r\n?/g, '\n').split('\n');
  const out: string[] = [];
  let para: string[] = [];
  const flush = () => {
    if (para.length) out.push(`<p>${para.map(renderInline).join('<br>')}</p>`);
    para = [];
  };
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      flush();
      const close = fence[1];
      const body: string[] = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(close)) body.push(lines[i++]);
      i++;
      const lang = fence[2] ? ` class="language-${escapeHtml(fence[2])}" data-lang="${escapeHtml(fence[2])}"` : '';
      out.push(`<pre><code${lang}>${escapeHtml(body.join('\n'))}</code></pre>`);
      continue;
    }
    if (line.trim() === '') {
      flush();
      i++;
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      flush();
      const n = heading[1].length;
      out.push(`<h${n}>${renderInline(heading[2])}</h${n}>`);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      flush();
      out.push('<hr>');
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      flush();
      const body: string[] = [];
      while (i < lines.length && QUOTE.test(lines[i])) body.push((QUOTE.exec(lines[i++]) as RegExpExecArray)[1]);
      out.push(`<blockquote>${renderMarkdown(body.join('\n'))}</blockquote>`);
      continue;
    }
    if (BULLET.test(line) || ORDERED.test(line)) {
      flush();
      const ordered = !BULLET.test(line);
      const re = ordered ? ORDERED : BULLET;
      const items: string[] = [];
      const first = ordered ? Number((ORDERED.exec(line) as RegExpExecArray)[1]) : 1;
      while (i < lines.length) {
        const m = re.exec(lines[i]);
        if (m) {
          items.push(ordered ? m[2] : m[1]);
        } else if (items.length && /^\s{2,}\S/.test(lines[i])) {
          items[items.length - 1] += `\n${lines[i].trim()}`;
        } else break;
        i++;
      }
      const lis = items.map((t) => `<li>${t.split('\n').map(renderInline).join('<br>')}</li>`).join('');
      const start = ordered && first !== 1 ? ` start="${first}"` : '';
      out.push(ordered ? `<ol${start}>${lis}</ol>` : `<ul>${lis}</ul>`);
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
  return out.join('');
}
