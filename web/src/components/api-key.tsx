// The API key prompt (a modal dialog) and the header button that opens it.
//
// Key design choice: the dialog only renders the gate's state (src/auth.ts)
// and hands it what the user typed; the gate checks the key with the server,
// stores it and resumes the waiting requests. The field is a password input
// whose value is cleared whenever the dialog closes, so the key is not left
// in the page; the rest of the page is made inert while the dialog is open.
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import type { AuthGate, GateState } from '../auth';

export function useGate(gate: AuthGate): GateState {
  const [s, setS] = useState(gate.state);
  useEffect(() => {
    setS(gate.state);
    return gate.subscribe(setS);
  }, [gate]);
  return s;
}

export function ApiKeyDialog({ gate }: { gate: AuthGate }) {
  const s = useGate(gate);
  const [value, setValue] = useState('');
  const [shown, setShown] = useState(false);
  const input = useRef<HTMLInputElement>(null);
  const before = useRef<Element | null>(null);

  useEffect(() => {
    if (s.open) {
      before.current = document.activeElement;
      input.current?.focus();
    } else {
      setValue('');
      setShown(false);
      const el = before.current as HTMLElement | null;
      before.current = null;
      if (el && typeof el.focus === 'function' && el.isConnected) el.focus();
    }
  }, [s.open]);
  // The dialog switching mode while open (after "Forget key" the button that had the
  // focus is gone): keep the focus inside, in the field, so Esc and typing still work.
  useEffect(() => {
    if (s.open) input.current?.focus();
  }, [s.mode]);
  // A rejected key: put the caret back in the field to type it again.
  useEffect(() => {
    if (s.error) input.current?.focus();
  }, [s.error]);
  // Esc closes the dialog wherever the focus is: when the dialog switches mode, the
  // focused button disappears and the focus reaches the field only after a render, so
  // a key handler on the dialog itself could miss an early Esc. A layout effect, so the
  // listener is there as soon as the dialog is in the DOM.
  useLayoutEffect(() => {
    if (!s.open) return undefined;
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape') {
        e.preventDefault();
        e.stopPropagation();
        gate.cancel();
      }
    };
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
  }, [s.open, gate]);

  if (!s.open) return null;
  const needed = s.mode === 'needed';
  const title = needed ? 'This server needs an API key' : 'API key';
  return (
    <div class="modal-backdrop">
      <div
        class="modal"
        role="dialog"
        aria-modal="true"
        aria-labelledby="api-key-title"
        aria-describedby="api-key-desc"
      >
        <h2 id="api-key-title">{title}</h2>
        <div id="api-key-desc">
          {needed ? (
            <p>
              {s.staleKey
                ? 'The key stored in this browser was not accepted; the server may have been restarted with another key. '
                : 'This server was started with --api-key, so every request must carry its key. '}
              Enter the key to use Chat, Studio and Memory.
            </p>
          ) : (
            <p>{s.hasKey ? 'A key is stored in this browser. Enter a new key to replace it, or forget it.' : 'No key is stored in this browser.'}</p>
          )}
          <p class="hint">
            The key is kept in this browser's local storage and sent only in the <code>Authorization</code> header.
          </p>
        </div>
        <form
          onSubmit={(e) => {
            e.preventDefault();
            // The field itself, not state that may not have re-rendered yet.
            void gate.submit(input.current?.value ?? value);
          }}
        >
          <label for="api-key-input">API key</label>
          <div class="key-row">
            <input
              id="api-key-input"
              ref={input}
              type={shown ? 'text' : 'password'}
              name="api-key"
              autoComplete="current-password"
              spellcheck={false}
              autoCapitalize="off"
              value={value}
              onInput={(e) => setValue((e.target as HTMLInputElement).value)}
              aria-invalid={s.error ? true : undefined}
              aria-describedby={s.error ? 'api-key-error' : undefined}
              disabled={s.checking}
            />
            <button type="button" class="ghost" aria-pressed={shown} onClick={() => setShown((v) => !v)}>
              {shown ? 'Hide' : 'Show'}
            </button>
          </div>
          {s.error && (
            <p id="api-key-error" class="notice error" role="alert">
              {s.error}
            </p>
          )}
          <div class="modal-actions">
            <button type="submit" class="send" disabled={s.checking || value.trim() === ''}>
              {s.checking ? 'Checking…' : 'Use this key'}
            </button>
            {!needed && s.hasKey && (
              <button type="button" class="danger" onClick={() => gate.forget()}>
                Forget key
              </button>
            )}
            <button type="button" class="ghost" onClick={() => gate.cancel()}>
              {needed ? 'Cancel' : 'Close'}
            </button>
          </div>
        </form>
      </div>
    </div>
  );
}

/** The header's entry to the key: shown once a key is stored or the server asked for one. */
export function ApiKeyButton({ gate }: { gate: AuthGate }) {
  const s = useGate(gate);
  if (!s.hasKey && !s.needed) return null;
  const missing = !s.hasKey;
  return (
    <button
      type="button"
      class={missing ? 'key-button missing' : 'key-button'}
      aria-haspopup="dialog"
      onClick={() => gate.manage()}
      title={missing ? 'This server needs an API key' : 'Change or forget the API key'}
    >
      {missing ? 'API key needed' : 'API key'}
    </button>
  );
}
