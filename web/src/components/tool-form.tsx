// The form of one generate tool: its schema's parameters, a model picker of
// the pulled models of its kind, and a Generate button.
//
// Key design choice: inputs hold plain text keyed by parameter name; on
// submit the text is read from the inputs themselves and checked with
// `buildArgs` (the schema's own bounds), so the message names the parameter
// the way its label does. Enter in a text box submits and Shift+Enter adds a
// line, as in the chat composer.
import { useMemo, useRef, useState } from 'preact/hooks';
import type { ModelRow } from '../api';
import { buildArgs, fieldsFromSchema, type Field } from '../tool-form';

export interface ToolFormProps {
  tool: string;
  title: string;
  schema: unknown;
  models: ModelRow[];
  busy: boolean;
  error: string | null;
  onSubmit: (args: Record<string, unknown>) => void;
}

function FieldInput({ id, f, value, onInput, onKeyDown, invalid }: {
  id: string;
  f: Field;
  value: string;
  onInput: (v: string) => void;
  onKeyDown: (e: KeyboardEvent) => void;
  invalid: boolean;
}) {
  const common = {
    id,
    name: f.name,
    value,
    required: f.required,
    'aria-invalid': invalid || undefined,
    'aria-describedby': f.hint ? `${id}-hint` : undefined,
    onInput: (e: Event) => onInput((e.target as HTMLInputElement).value),
  };
  if (f.type === 'longtext')
    return <textarea {...common} rows={2} onKeyDown={onKeyDown} placeholder={f.required ? '' : 'optional'} />;
  if (f.type === 'choice')
    return (
      <select {...common}>
        {f.choices?.map((c) => (
          <option key={c} value={c}>
            {c}
          </option>
        ))}
      </select>
    );
  if (f.type === 'integer' || f.type === 'number')
    return (
      <input
        {...common}
        type="number"
        inputMode={f.type === 'integer' ? 'numeric' : 'decimal'}
        min={f.min ?? (f.above !== undefined ? f.above + (f.step ?? 0) : undefined)}
        max={f.max}
        step={f.type === 'integer' ? 1 : 'any'}
        placeholder={f.required ? '' : f.name === 'seed' ? 'random' : 'default'}
      />
    );
  return <input {...common} type="text" placeholder={f.required ? '' : 'optional'} />;
}

/** "1–8", "≥ 0", "> 0" or '' for the label. */
export function rangeText(f: Field): string {
  if (f.min !== undefined && f.max !== undefined) return `${f.min}–${f.max}`;
  if (f.min !== undefined) return `≥ ${f.min}`;
  if (f.max !== undefined) return `≤ ${f.max}`;
  if (f.above !== undefined) return `> ${f.above}`;
  return '';
}

export function ToolForm({ tool, title, schema, models, busy, error, onSubmit }: ToolFormProps) {
  const fields = useMemo(() => fieldsFromSchema(schema), [schema]);
  const [values, setValues] = useState<Record<string, string>>({});
  const [problem, setProblem] = useState<{ field: string; message: string } | null>(null);
  const pulled = models.filter((m) => m.pulled);
  const [model, setModel] = useState<string>('');
  const chosen = pulled.some((m) => m.id === model) ? model : (pulled[0]?.id ?? '');

  const form = useRef<HTMLFormElement>(null);

  /** The values as the inputs hold them now (a keystroke may not have re-rendered yet). */
  const current = (): Record<string, string> => {
    const out: Record<string, string> = { ...values };
    for (const f of fields) {
      const el = form.current?.elements.namedItem(f.name);
      if (el && 'value' in el) out[f.name] = String(el.value);
    }
    return out;
  };

  const submit = () => {
    const built = buildArgs(fields, current());
    if (!built.ok) {
      setProblem({ field: built.field, message: built.message });
      document.getElementById(`${tool}-${built.field}`)?.focus();
      return;
    }
    setProblem(null);
    onSubmit(chosen ? { ...built.args, model: chosen } : built.args);
  };
  const onKeyDown = (e: KeyboardEvent) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (!busy) submit();
    }
  };
  const shown = problem?.message ?? error;

  return (
    <form
      ref={form}
      class="tool-form"
      aria-label={`${title} parameters`}
      noValidate
      onSubmit={(e) => {
        e.preventDefault();
        if (!busy) submit();
      }}
    >
      <div class="fields">
        {fields.map((f) => {
          const id = `${tool}-${f.name}`;
          return (
            <div key={f.name} class={`field ${f.type === 'longtext' ? 'wide' : ''}`}>
              <label for={id}>
                {f.label}
                {f.required && <span aria-hidden="true"> *</span>}
                {rangeText(f) && <span class="range"> {rangeText(f)}</span>}
              </label>
              <FieldInput
                id={id}
                f={f}
                value={values[f.name] ?? f.initial}
                invalid={problem?.field === f.name}
                onKeyDown={onKeyDown}
                onInput={(v) => setValues((s) => ({ ...s, [f.name]: v }))}
              />
              {f.hint && (
                <span id={`${id}-hint`} class="sr-only">
                  {f.hint}
                </span>
              )}
            </div>
          );
        })}
        <div class="field model">
          <label for={`${tool}-model`}>Model</label>
          <select id={`${tool}-model`} value={chosen} onChange={(e) => setModel((e.target as HTMLSelectElement).value)} disabled={pulled.length === 0}>
            {pulled.length === 0 && <option value="">none pulled</option>}
            {pulled.map((m) => (
              <option key={m.id} value={m.id}>
                {m.id}
              </option>
            ))}
          </select>
        </div>
      </div>
      {shown && (
        <p class="notice error" role="alert">
          {shown}
        </p>
      )}
      {pulled.length === 0 && (
        <p class="notice">
          No {title.toLowerCase()} model is pulled: {models.map((m) => `favlo pull ${m.id}`).join(', ') || 'none is listed'}.
        </p>
      )}
      <div class="form-actions">
        <button type="submit" class="send" disabled={busy || pulled.length === 0} aria-label={`Generate ${title.toLowerCase()}`}>
          {busy ? 'Starting…' : 'Generate'}
        </button>
      </div>
    </form>
  );
}
