// The model picker: every row of /v1/models, chat rows selectable, with each
// row's kind, pulled and resident state in the option text and beside it.
import type { ModelRow } from '../api';

export function describeModel(m: ModelRow): string {
  const state = [m.kind, m.pulled ? 'pulled' : 'not pulled'];
  if (m.resident) state.push('resident');
  return `${m.id} (${state.join(', ')})`;
}

interface Props {
  models: ModelRow[] | null;
  value: string | null;
  disabled: boolean;
  onChange: (id: string) => void;
}

export function ModelPicker({ models, value, disabled, onChange }: Props) {
  const chat = (models ?? []).filter((m) => m.kind === 'chat');
  const other = (models ?? []).filter((m) => m.kind !== 'chat');
  const selected = (models ?? []).find((m) => m.id === value);
  return (
    <div class="picker">
      <label for="model-picker">Model</label>
      <select
        id="model-picker"
        value={value ?? ''}
        disabled={disabled || models === null}
        onChange={(e) => onChange((e.target as HTMLSelectElement).value)}
      >
        {models === null && <option value="">Loading models…</option>}
        <optgroup label="Chat">
          {chat.map((m) => (
            <option key={m.id} value={m.id} data-kind={m.kind} data-pulled={String(m.pulled)} data-resident={String(m.resident)}>
              {describeModel(m)}
            </option>
          ))}
        </optgroup>
        {other.length > 0 && (
          <optgroup label="Other kinds (not for chat)">
            {other.map((m) => (
              <option key={m.id} value={m.id} disabled data-kind={m.kind} data-pulled={String(m.pulled)} data-resident={String(m.resident)}>
                {describeModel(m)}
              </option>
            ))}
          </optgroup>
        )}
      </select>
      {selected && (
        <span class="badges" aria-label="Selected model state">
          <span class="badge">{selected.kind}</span>
          <span class={selected.pulled ? 'badge ok' : 'badge warn'}>{selected.pulled ? 'pulled' : 'not pulled'}</span>
          {selected.resident && <span class="badge ok">resident</span>}
        </span>
      )}
    </div>
  );
}
