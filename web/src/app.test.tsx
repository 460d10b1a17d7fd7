// The shell's tab bar: a click shows its panel in the same turn of the event loop, so a
// key pressed right after the click (Enter in the chat box) reaches the shown view.
// The hash still follows the tab (links, back and forward).
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { render } from 'preact';
import { App } from './app';

let root: HTMLDivElement;
beforeEach(() => {
  localStorage.clear();
  location.hash = '#studio';
  root = document.createElement('div');
  document.body.appendChild(root);
  vi.stubGlobal('fetch', async (input: unknown) => {
    const path = new URL(String(input), 'http://127.0.0.1').pathname;
    if (path === '/v1/models') return Response.json({ data: [{ id: 'small-chat', kind: 'chat', pulled: true, resident: true }] });
    return new Response('', { status: 404 });
  });
});
afterEach(() => {
  render(null, root);
  root.remove();
  localStorage.clear();
  vi.unstubAllGlobals();
});

const panel = (id: string) => root.querySelector<HTMLElement>(`#panel-${id}`);
const clickTab = (id: string) =>
  root.querySelector(`#tab-${id}`)?.dispatchEvent(new MouseEvent('click', { bubbles: true, cancelable: true }));
// Preact renders state changes in a microtask: flush those, but no task (no hashchange).
const microtasks = async () => {
  for (let i = 0; i < 5; ++i) await Promise.resolve();
};

describe('tab bar', () => {
  it('shows the clicked tab before any hashchange event is handled', async () => {
    render(<App />, root);
    expect(panel('studio')?.hidden).toBe(false);
    expect(panel('chat')?.hidden).toBe(true);
    const changes: string[] = [];
    const seen = () => changes.push(location.hash);
    addEventListener('hashchange', seen);
    try {
      clickTab('chat');
      await microtasks();
      expect(changes).toEqual([]);
      expect(panel('chat')?.hidden).toBe(false);
      expect(panel('studio')?.hidden).toBe(true);
      expect(root.querySelector('#tab-chat')?.getAttribute('aria-selected')).toBe('true');
      clickTab('studio');
      await microtasks();
      expect(panel('studio')?.hidden).toBe(false);
      expect(panel('chat')?.hidden).toBe(true);
    } finally {
      removeEventListener('hashchange', seen);
    }
  });

  it('follows the hash (a link or the back button)', async () => {
    render(<App />, root);
    await new Promise((r) => setTimeout(r, 20));  // the shell's effects (its listener) have run
    location.hash = '#chat';
    dispatchEvent(new Event('hashchange'));  // as the browser does after the change
    await vi.waitFor(() => expect(panel('chat')?.hidden).toBe(false));
    expect(panel('studio')?.hidden).toBe(true);
  });
});
