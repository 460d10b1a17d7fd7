import { describe, expect, it } from 'vitest';
import { escapeHtml, renderMarkdown } from './markdown';

function dom(html: string): HTMLDivElement {
  const d = document.createElement('div');
  d.innerHTML = html;
  return d;
}

const ALLOWED = new Set(['P', 'BR', 'CODE', 'PRE', 'STRONG', 'EM', 'DEL', 'A', 'UL', 'OL', 'LI', 'H1', 'H2', 'H3', 'H4', 'H5', 'H6', 'HR', 'BLOCKQUOTE']);

/** Every element is from the renderer's fixed set, no on* attribute, only safe hrefs. */
function assertSafe(html: string) {
  for (const el of Array.from(dom(html).querySelectorAll('*'))) {
    expect(ALLOWED.has(el.tagName), `tag ${el.tagName} in ${html}`).toBe(true);
    for (const a of Array.from(el.attributes)) {
      expect(a.name.startsWith('on'), `attribute ${a.name}`).toBe(false);
      expect(['href', 'target', 'rel', 'class', 'data-lang', 'start']).toContain(a.name);
    }
    if (el.tagName === 'A') expect(el.getAttribute('href')).toMatch(/^(https?:\/\/|mailto:)/);
  }
}

const ATTACKS = [
  '<script>alert(1)</script>',
  '<img src=x onerror="alert(1)">',
  'hello <b onclick="x()">bold</b> **and <i>**',
  '```html\n<script>alert(1)</script>\n```',
  '`<svg onload=alert(1)>`',
  '[click](javascript:alert(1))',
  '[click](http://example.com/"onmouseover="alert(1))',
  '[x](data:text/html;base64,PHNjcmlwdD4=)',
  '# <iframe src="http://evil">',
  '- <a href="javascript:1">x</a>\n- item',
  '> <style>body{display:none}</style>',
  '```\nunterminated <script>',
  "it's \"quoted\" & <b>",
];

describe('renderMarkdown escaping', () => {
  for (const src of ATTACKS) {
    it(`keeps ${JSON.stringify(src)} inert`, () => {
      const html = renderMarkdown(src);
      assertSafe(html);
      // The visible text keeps the characters the model wrote.
      const text = dom(html).textContent ?? '';
      for (const ch of ['<', '>']) if (src.includes(ch) && !src.startsWith('[')) expect(text).toContain(ch);
    });
  }

  it('escapes the five HTML specials', () => {
    expect(escapeHtml(`<a href="x">'&'</a>`)).toBe('&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;');
  });

  it('drops unsafe link targets but keeps their text', () => {
    const d = dom(renderMarkdown('[click](javascript:alert(1))'));
    expect(d.querySelector('a')).toBeNull();
    expect(d.textContent).toContain('click');
  });
});

describe('renderMarkdown structure', () => {
  it('renders a fenced code block with its language, verbatim', () => {
    const d = dom(renderMarkdown('Intro:\n\n```rust\nfn main() { let x = 1 < 2 && *p; }\n```\nAfter.'));
    const code = d.querySelector('pre > code');
    expect(code?.getAttribute('data-lang')).toBe('rust');
    expect(code?.textContent).toBe('fn main() { let x = 1 < 2 && *p; }');
    expect(d.querySelectorAll('p').length).toBe(2);
  });

  it('renders an unterminated fence (mid-stream) as code to the end', () => {
    const d = dom(renderMarkdown('```py\nprint(1)\nprint(2'));
    expect(d.querySelector('pre code')?.textContent).toBe('print(1)\nprint(2');
  });

  it('renders headings, lists, emphasis, inline code and links', () => {
    const d = dom(
      renderMarkdown('## Title\n\n1. one **bold**\n2. two *it* and `c*o*de`\n\n- a\n- b [site](https://favlo.dev/x?a=1&b=2)\n\n---\n> quoted'),
    );
    expect(d.querySelector('h2')?.textContent).toBe('Title');
    expect(d.querySelectorAll('ol > li').length).toBe(2);
    expect(d.querySelector('ol strong')?.textContent).toBe('bold');
    expect(d.querySelector('ol em')?.textContent).toBe('it');
    expect(d.querySelector('ol code')?.textContent).toBe('c*o*de');
    expect(d.querySelectorAll('ul > li').length).toBe(2);
    expect(d.querySelector('a')?.getAttribute('href')).toBe('https://favlo.dev/x?a=1&b=2');
    expect(d.querySelector('hr')).not.toBeNull();
    expect(d.querySelector('blockquote p')?.textContent).toBe('quoted');
  });

  it('keeps single newlines in a paragraph as line breaks', () => {
    const d = dom(renderMarkdown('a\nb'));
    expect(d.querySelectorAll('p').length).toBe(1);
    expect(d.querySelectorAll('br').length).toBe(1);
  });

  it('does not treat snake_case words as emphasis', () => {
    expect(dom(renderMarkdown('use snake_case_name here')).querySelector('em')).toBeNull();
  });
});
