// The whole page against a fake `favlo serve --api-key`: the prompt on 401,
// a wrong key refused with a message, the right one loading the models, the
// header button to change or forget the key.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { render } from 'preact';
import { App } from './app';
import { API_KEY_STORAGE, gate, KEY_REFUSED } from './auth';

const KEY = 'right-key';

let root: HTMLDivElement;
let seen: { path: string; auth: string | null }[];
beforeEach(() => {
  localStorage.clear();
  location.hash = '#chat';
  root = document.createElement('div');
  document.body.appendChild(root);
  seen = [];
  vi.stubGlobal('fetch', async (input: unknown, init?: RequestInit) => {
    const path = new URL(String(input), 'http://127.0.0.1').pathname;
    const auth = new Headers(init?.headers).get('authorization');
    seen.push({ path, auth });
    if (auth !== `Bearer ${KEY}`)
      return Response.json(
        { error: { message: 'invalid or missing API key; send `Authorization: Bearer <key>`', code: 'invalid_api_key' } },
        { status: 401 },
      );
    if (path === '/v1/models') return Response.json({ data: [{ id: 'small-chat', kind: 'chat', pulled: true, resident: true }] });
    return new Response('', { status: 404 });
  });
});
afterEach(() => {
  render(null, root);
  root.remove();
  gate.cancel();
  gate.forget();
  localStorage.clear();
  vi.unstubAllGlobals();
});

const $ = <T extends Element = HTMLElement>(sel: string) => root.querySelector<T>(sel);
const dialog = () => $('[role="dialog"]');
const type = (value: string) => {
  const el = $<HTMLInputElement>('#api-key-input');
  if (!el) throw new Error('no key field');
  el.value = value;
  el.dispatchEvent(new Event('input', { bubbles: true }));
};
const submit = () => $<HTMLFormElement>('[role="dialog"] form')?.dispatchEvent(new Event('submit', { bubbles: true, cancelable: true }));
const buttonNamed = (text: string) => Array.from(root.querySelectorAll('button')).find((b) => b.textContent === text);

describe('API key prompt', () => {
  it('asks on 401, refuses a wrong key with a message, and the right key loads the models', async () => {
    render(<App />, root);
    await vi.waitFor(() => expect(dialog()).not.toBeNull());
    const d = dialog();
    expect(d?.getAttribute('aria-modal')).toBe('true');
    expect($(`#${d?.getAttribute('aria-labelledby')}`)?.textContent).toBe('This server needs an API key');
    expect($<HTMLInputElement>('#api-key-input')?.type).toBe('password');
    expect($('label[for="api-key-input"]')?.textContent).toBe('API key');
    expect($('.shell')?.hasAttribute('inert')).toBe(true);
    expect($('#model-picker option[value="small-chat"]')).toBeNull();

    type('wrong-key');
    submit();
    await vi.waitFor(() => expect($('[role="alert"]#api-key-error')?.textContent).toBe('The server rejected this key. Check it and try again.'));
    expect($('#api-key-input')?.getAttribute('aria-invalid')).toBe('true');
    expect(localStorage.getItem(API_KEY_STORAGE)).toBeNull();

    type(KEY);
    submit();
    await vi.waitFor(() => expect(dialog()).toBeNull());
    await vi.waitFor(() => expect($<HTMLOptionElement>('#model-picker option')?.value).toBe('small-chat'));
    expect(localStorage.getItem(API_KEY_STORAGE)).toBe(KEY);
    expect($('.shell')?.hasAttribute('inert')).toBe(false);
    // The key went only into the header, never into a path.
    expect(seen.some((s) => s.path.includes(KEY) || s.path.includes('wrong-key'))).toBe(false);
    expect(seen.at(-1)).toEqual({ path: '/v1/models', auth: `Bearer ${KEY}` });
  });

  it('the header button changes or forgets the stored key; Esc closes the dialog', async () => {
    localStorage.setItem(API_KEY_STORAGE, KEY);
    render(<App />, root);
    await vi.waitFor(() => expect($<HTMLOptionElement>('#model-picker option')?.value).toBe('small-chat'));
    expect(dialog()).toBeNull();
    const keyButton = $<HTMLButtonElement>('.key-button');
    expect(keyButton?.textContent).toBe('API key');
    expect(keyButton?.getAttribute('aria-haspopup')).toBe('dialog');

    keyButton?.click();
    await vi.waitFor(() => expect(dialog()).not.toBeNull());
    expect($('#api-key-title')?.textContent).toBe('API key');
    expect($('#api-key-desc')?.textContent).toContain('A key is stored in this browser');
    dialog()?.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }));
    await vi.waitFor(() => expect(dialog()).toBeNull());
    expect(localStorage.getItem(API_KEY_STORAGE)).toBe(KEY);

    $<HTMLButtonElement>('.key-button')?.click();
    await vi.waitFor(() => expect(buttonNamed('Forget key')).toBeDefined());
    buttonNamed('Forget key')?.click();
    expect(localStorage.getItem(API_KEY_STORAGE)).toBeNull();
    // Forgetting reloads the views; the server then asks for the key again.
    await vi.waitFor(() => expect($('#api-key-title')?.textContent).toBe('This server needs an API key'));
    buttonNamed('Cancel')?.click();
    await vi.waitFor(() => expect(dialog()).toBeNull());
    await vi.waitFor(() => expect($('.key-button')?.textContent).toBe('API key needed'));
    expect($('[role="alert"]')?.textContent).toBe(`Could not list models: ${KEY_REFUSED}`);
  });
});
