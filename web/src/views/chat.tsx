// The Chat view: model picker, streamed conversation, stop, tokens/s.
//
// Key design choice: the conversation is the single source of truth for the
// page and for localStorage; the reply being streamed is kept apart and only
// joins the conversation (and storage) when it ends or is stopped.
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { listModels, type ModelRow } from '../api';
import { gate } from '../auth';
import { useGate } from '../components/api-key';
import { streamChat, type StreamProgress } from '../chat';
import { loadConversation, saveConversation, type ChatMessage, type Conversation } from '../storage';
import { ModelPicker } from '../components/model-picker';
import { MessageView } from '../components/message';

export function pickDefaultModel(rows: ModelRow[], saved: string | null): string | null {
  const chat = rows.filter((r) => r.kind === 'chat');
  if (saved && chat.some((r) => r.id === saved)) return saved;
  return (chat.find((r) => r.resident) ?? chat.find((r) => r.pulled) ?? chat[0])?.id ?? null;
}

export function ChatView({ active }: { active: boolean }) {
  const [conv, setConv] = useState<Conversation>(() => loadConversation());
  const [models, setModels] = useState<ModelRow[] | null>(null);
  const [modelsError, setModelsError] = useState<string | null>(null);
  const [draft, setDraft] = useState('');
  const [live, setLive] = useState<StreamProgress | null>(null);
  const [saveFailed, setSaveFailed] = useState(false);
  const abort = useRef<AbortController | null>(null);
  const logEnd = useRef<HTMLDivElement>(null);
  const input = useRef<HTMLTextAreaElement>(null);
  const streaming = live !== null;

  const refreshModels = useCallback(async () => {
    try {
      const rows = await listModels();
      setModels(rows);
      setModelsError(null);
      setConv((c) => ({ ...c, model: pickDefaultModel(rows, c.model) }));
    } catch (e) {
      setModelsError((e as Error).message);
    }
  }, []);

  // Load again whenever the API key changes (a key given after a 401, or a new one).
  const { generation } = useGate(gate);
  useEffect(() => {
    void refreshModels();
  }, [refreshModels, generation]);
  useEffect(() => {
    if (active) void refreshModels();
  }, [active, refreshModels]);
  useEffect(() => {
    setSaveFailed(!saveConversation(conv));
  }, [conv]);
  useEffect(() => {
    logEnd.current?.scrollIntoView?.({ block: 'end' });
  }, [conv.messages.length, live?.text]);

  const stop = useCallback(() => abort.current?.abort(), []);

  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape' && abort.current) {
        e.preventDefault();
        stop();
      }
    };
    addEventListener('keydown', onKey);
    return () => removeEventListener('keydown', onKey);
  }, [stop]);

  const send = useCallback(async () => {
    const text = draft.trim();
    if (!text || streaming || !conv.model) return;
    const model = conv.model;
    const history: ChatMessage[] = [...conv.messages, { role: 'user', content: text }];
    setConv({ model, messages: history });
    setDraft('');
    const ctl = new AbortController();
    abort.current = ctl;
    setLive({ text: '', tokens: 0, tokensPerSecond: null });
    let reply: ChatMessage;
    try {
      const r = await streamChat({
        model,
        messages: history.filter((m) => !m.error).map((m) => ({ role: m.role, content: m.content })),
        signal: ctl.signal,
        onProgress: setLive,
      });
      reply = {
        role: 'assistant',
        content: r.text,
        stats: { tokens: r.tokens, tokensPerSecond: r.tokensPerSecond, finish: r.stopped ? 'stopped' : r.finish },
      };
    } catch (e) {
      reply = { role: 'assistant', content: '', error: (e as Error).message };
    } finally {
      abort.current = null;
    }
    setLive(null);
    setConv((c) => ({ ...c, messages: [...c.messages, reply] }));
    void refreshModels();
    input.current?.focus();
  }, [draft, streaming, conv, refreshModels]);

  const onKeyDown = (e: KeyboardEvent) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      void send();
    }
  };

  const selected = useMemo(() => models?.find((m) => m.id === conv.model) ?? null, [models, conv.model]);

  return (
    <div class="chat">
      <div class="chat-head">
        <ModelPicker
          models={models}
          value={conv.model}
          disabled={streaming}
          onChange={(id) => setConv((c) => ({ ...c, model: id }))}
        />
        <button
          type="button"
          class="ghost"
          onClick={() => setConv((c) => ({ ...c, messages: [] }))}
          disabled={streaming || conv.messages.length === 0}
          aria-label="Start a new conversation"
        >
          New chat
        </button>
      </div>
      {modelsError && (
        <p class="notice error" role="alert">
          Could not list models: {modelsError}
        </p>
      )}
      {models && !selected && <p class="notice">No chat model is listed by this server.</p>}
      <div class="log" role="log" aria-label="Conversation" aria-live="polite" aria-busy={streaming}>
        {conv.messages.length === 0 && !streaming && (
          <p class="empty">Ask something. Enter sends, Shift+Enter adds a line, Esc stops.</p>
        )}
        {conv.messages.map((m, i) => (
          <MessageView key={i} message={m} />
        ))}
        {live && <MessageView message={{ role: 'assistant', content: live.text }} live={live} />}
        <div ref={logEnd} />
      </div>
      {saveFailed && <p class="notice">This browser refused to store the conversation.</p>}
      <form
        class="composer"
        onSubmit={(e) => {
          e.preventDefault();
          void send();
        }}
      >
        <label for="chat-input" class="sr-only">
          Message
        </label>
        <textarea
          id="chat-input"
          ref={input}
          rows={2}
          placeholder={selected ? `Message ${selected.id}` : 'Message'}
          value={draft}
          onInput={(e) => setDraft((e.target as HTMLTextAreaElement).value)}
          onKeyDown={onKeyDown}
          aria-describedby="chat-keys"
        />
        <span id="chat-keys" class="sr-only">
          Enter sends, Shift+Enter inserts a new line, Escape stops the reply.
        </span>
        {streaming ? (
          <button type="button" class="stop" onClick={stop} aria-label="Stop generating">
            Stop
          </button>
        ) : (
          <button type="submit" class="send" disabled={!draft.trim() || !conv.model} aria-label="Send message">
            Send
          </button>
        )}
      </form>
    </div>
  );
}
