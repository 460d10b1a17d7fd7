import { describe, expect, it } from 'vitest';
import { buildArgs, fieldsFromSchema } from './tool-form';
import toolsList from './testing/tools-list.json';

const schema = (name: string) => toolsList.tools.find((t) => t.name === name)?.inputSchema;

describe('fieldsFromSchema (favlo serve tools/list)', () => {
  it('gives the video form its bounds, defaults and formats; the model is left to the picker', () => {
    const f = fieldsFromSchema(schema('generate_video'));
    expect(f.map((x) => x.name)).toEqual(['prompt', 'seconds', 'fps', 'size', 'response_format', 'seed']);
    const by = Object.fromEntries(f.map((x) => [x.name, x]));
    expect(by.seconds).toMatchObject({ type: 'integer', min: 1, max: 10, initial: '2', label: 'Seconds' });
    expect(by.fps).toMatchObject({ type: 'integer', min: 8, max: 24, initial: '12', label: 'Frames per second' });
    expect(by.response_format).toMatchObject({ type: 'choice', choices: ['mp4', 'avi'], initial: 'mp4' });
    expect(by.prompt).toMatchObject({ type: 'longtext', required: false });
    expect(by.seed).toMatchObject({ type: 'integer', min: 0, initial: '' });
  });

  it('marks speech text required and speed above zero', () => {
    const f = fieldsFromSchema(schema('generate_speech'));
    expect(f.map((x) => x.name)).toEqual(['text', 'speed', 'response_format', 'seed']);
    expect(f[0]).toMatchObject({ type: 'longtext', required: true, label: 'Text to speak' });
    expect(f[1]).toMatchObject({ type: 'number', above: 0, initial: '1' });
    expect(f[2].choices).toEqual(['wav', 'flac']);
  });

  it('builds a form for a tool it has never seen (music)', () => {
    const f = fieldsFromSchema({
      type: 'object',
      required: ['prompt'],
      properties: { prompt: { type: 'string' }, seconds: { type: 'integer', minimum: 5, maximum: 30, default: 10 }, tempo_bpm: { type: 'number' } },
    });
    expect(f.map((x) => [x.name, x.label, x.type, x.required])).toEqual([
      ['prompt', 'Prompt', 'longtext', true],
      ['seconds', 'Seconds', 'integer', false],
      ['tempo_bpm', 'Tempo bpm', 'number', false],
    ]);
    expect(fieldsFromSchema(undefined)).toEqual([]);
  });
});

describe('buildArgs', () => {
  const video = fieldsFromSchema(schema('generate_video'));
  const speech = fieldsFromSchema(schema('generate_speech'));

  it('sends numbers as numbers, keeps defaults and leaves empty optionals out', () => {
    expect(buildArgs(video, { seconds: '10', fps: '24', prompt: '  a walk  ' })).toEqual({
      ok: true,
      args: { prompt: 'a walk', seconds: 10, fps: 24, response_format: 'mp4' },
    });
    expect(buildArgs(speech, { text: 'Hello', speed: '1.25', seed: '7', response_format: 'flac' })).toEqual({
      ok: true,
      args: { text: 'Hello', speed: 1.25, seed: 7, response_format: 'flac' },
    });
  });

  it('names the parameter that is out of bounds, malformed or missing', () => {
    expect(buildArgs(video, { seconds: '11' })).toEqual({ ok: false, field: 'seconds', message: 'Seconds must be at most 10' });
    expect(buildArgs(video, { fps: '7' })).toEqual({ ok: false, field: 'fps', message: 'Frames per second must be at least 8' });
    expect(buildArgs(video, { seconds: '2.5' })).toEqual({ ok: false, field: 'seconds', message: 'Seconds must be a whole number' });
    expect(buildArgs(video, { seed: '-1' })).toMatchObject({ ok: false, field: 'seed' });
    expect(buildArgs(video, { response_format: 'gif' })).toEqual({ ok: false, field: 'response_format', message: 'Format must be one of mp4, avi' });
    expect(buildArgs(speech, { text: '   ' })).toEqual({ ok: false, field: 'text', message: 'Text to speak is required' });
    expect(buildArgs(speech, { text: 'hi', speed: '0' })).toEqual({ ok: false, field: 'speed', message: 'Speed must be above 0' });
    expect(buildArgs(speech, { text: 'hi', speed: 'fast' })).toEqual({ ok: false, field: 'speed', message: 'Speed must be a number' });
  });
});
