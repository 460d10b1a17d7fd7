// One message of the conversation. Assistant text goes through the escaping
// Markdown renderer; user text is shown as plain text.
import { useMemo } from 'preact/hooks';
import type { ChatMessage } from '../storage';
import type { StreamProgress } from '../chat';
import { renderMarkdown } from '../markdown';

export function formatStats(tokens: number, tps: number | null, finish: string | null): string {
  const parts = [`${tokens} token${tokens === 1 ? '' : 's'}`];
  if (tps !== null) parts.push(`${tps.toFixed(1)} tok/s`);
  if (finish) parts.push(finish);
  return parts.join(' · ');
}

export function MessageView({ message, live }: { message: ChatMessage; live?: StreamProgress }) {
  const html = useMemo(
    () => (message.role === 'assistant' ? renderMarkdown(message.content) : ''),
    [message.role, message.content],
  );
  const who = message.role === 'user' ? 'You' : message.role === 'assistant' ? 'Assistant' : 'System';
  return (
    <article class={`msg ${message.role}${live ? ' streaming' : ''}`} aria-label={`${who} message`}>
      <div class="who" aria-hidden="true">
        {who}
      </div>
      {message.role === 'assistant' ? (
        // Safe: renderMarkdown escapes every character of the model's text
        // and only adds its own fixed tags (see markdown.ts and its tests).
        <div class="md" dangerouslySetInnerHTML={{ __html: html }} />
      ) : (
        <div class="plain">{message.content}</div>
      )}
      {message.error && (
        <p class="notice error" role="alert">
          {message.error}
        </p>
      )}
      {live && (
        <div class="stats" aria-live="off" data-testid="live-stats">
          {formatStats(live.tokens, live.tokensPerSecond, 'streaming…')}
        </div>
      )}
      {message.stats && <div class="stats">{formatStats(message.stats.tokens, message.stats.tokensPerSecond, message.stats.finish)}</div>}
    </article>
  );
}
