// Form fields for a generate tool, derived from the tool's own input schema.
//
// Key design choice: the server's `inputSchema` (from tools/list) decides
// which parameters exist, their bounds, defaults and choices, so a tool the
// server adds later (generate_music) gets a working form without UI changes.
// A small table only adds friendlier labels and the order of the known
// parameters. `buildArgs` checks values against the same schema before any
// request, and leaves out optional fields left empty so the server's
// defaults apply.

export type FieldType = 'text' | 'longtext' | 'integer' | 'number' | 'choice';

export interface Field {
  name: string;
  label: string;
  type: FieldType;
  required: boolean;
  min?: number;
  max?: number;
  /** exclusive lower bound (speed > 0) */
  above?: number;
  step?: number;
  choices?: string[];
  /** the schema's default, as the input's initial text */
  initial: string;
  hint?: string;
}

interface PropSchema {
  type?: string;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  default?: unknown;
  description?: string;
}

const LABELS: Record<string, string> = {
  prompt: 'Prompt',
  text: 'Text to speak',
  n: 'Images',
  seconds: 'Seconds',
  fps: 'Frames per second',
  speed: 'Speed',
  seed: 'Seed',
  size: 'Size',
  response_format: 'Format',
  model: 'Model',
};
const ORDER = ['prompt', 'text', 'n', 'seconds', 'fps', 'speed', 'size', 'response_format', 'seed', 'model'];
/** Texts that get a multi-line box. */
const LONG = new Set(['prompt', 'text', 'lyrics']);

function labelOf(name: string): string {
  return LABELS[name] ?? name.replace(/_/g, ' ').replace(/^./, (c) => c.toUpperCase());
}

/** Fields for a tool's input schema; `model` is left to the caller (a picker of pulled models). */
export function fieldsFromSchema(schema: unknown): Field[] {
  const s = (typeof schema === 'object' && schema !== null ? schema : {}) as {
    properties?: Record<string, PropSchema>;
    required?: string[];
  };
  const props = s.properties ?? {};
  const required = new Set(Array.isArray(s.required) ? s.required : []);
  const names = Object.keys(props).filter((n) => n !== 'model');
  names.sort((a, b) => {
    const ia = ORDER.indexOf(a);
    const ib = ORDER.indexOf(b);
    return (ia < 0 ? ORDER.length : ia) - (ib < 0 ? ORDER.length : ib) || a.localeCompare(b);
  });
  return names.map((name) => {
    const p = props[name] ?? {};
    const f: Field = {
      name,
      label: labelOf(name),
      type: 'text',
      required: required.has(name),
      initial: p.default === undefined || p.default === null ? '' : String(p.default),
    };
    if (p.description) f.hint = p.description;
    if (Array.isArray(p.enum)) {
      f.type = 'choice';
      f.choices = p.enum.map(String);
      if (!f.initial && f.choices.length) f.initial = f.choices[0];
    } else if (p.type === 'integer' || p.type === 'number') {
      f.type = p.type;
      if (typeof p.minimum === 'number') f.min = p.minimum;
      if (typeof p.maximum === 'number') f.max = p.maximum;
      if (typeof p.exclusiveMinimum === 'number') f.above = p.exclusiveMinimum;
      f.step = p.type === 'integer' ? 1 : 0.05;
    } else if (LONG.has(name)) {
      f.type = 'longtext';
    }
    return f;
  });
}

export type BuiltArgs = { ok: true; args: Record<string, unknown> } | { ok: false; field: string; message: string };

/** Tool arguments from the form's text values, checked against the fields. */
export function buildArgs(fields: Field[], values: Record<string, string>): BuiltArgs {
  const args: Record<string, unknown> = {};
  for (const f of fields) {
    const raw = (values[f.name] ?? f.initial).trim();
    if (raw === '') {
      if (f.required) return { ok: false, field: f.name, message: `${f.label} is required` };
      continue;
    }
    if (f.type === 'integer' || f.type === 'number') {
      const v = Number(raw);
      if (!Number.isFinite(v) || (f.type === 'integer' && !Number.isInteger(v)))
        return { ok: false, field: f.name, message: `${f.label} must be ${f.type === 'integer' ? 'a whole number' : 'a number'}` };
      if (f.min !== undefined && v < f.min) return { ok: false, field: f.name, message: `${f.label} must be at least ${f.min}` };
      if (f.max !== undefined && v > f.max) return { ok: false, field: f.name, message: `${f.label} must be at most ${f.max}` };
      if (f.above !== undefined && v <= f.above) return { ok: false, field: f.name, message: `${f.label} must be above ${f.above}` };
      args[f.name] = v;
    } else if (f.type === 'choice') {
      if (f.choices && !f.choices.includes(raw)) return { ok: false, field: f.name, message: `${f.label} must be one of ${f.choices.join(', ')}` };
      args[f.name] = raw;
    } else {
      args[f.name] = raw;
    }
  }
  return { ok: true, args };
}

/** The generate tools the Studio offers, in a fixed order, with the media kind of their models. */
export const GENERATE_TOOLS: readonly { tool: string; kind: string; title: string }[] = [
  { tool: 'generate_image', kind: 'image', title: 'Image' },
  { tool: 'generate_video', kind: 'video', title: 'Video' },
  { tool: 'generate_speech', kind: 'voice', title: 'Speech' },
  { tool: 'generate_music', kind: 'music', title: 'Music' },
];
