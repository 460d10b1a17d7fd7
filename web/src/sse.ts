// Incremental parser for `text/event-stream` bodies.
//
// Key design choice: it is fed arbitrary text chunks (as a fetch body reader
// yields them) and keeps the unfinished line between calls, so an event split
// across chunks, or a CRLF split between two chunks, parses the same as when
// whole. Only the fields the chat stream uses are kept (event, data, id).

export interface SseEvent {
  event: string;
  data: string;
  id?: string;
}

export class SseParser {
  private buffer = '';
  private data: string[] = [];
  private event = '';
  private id: string | undefined;
  private sawCr = false;

  /** Feed a chunk; returns the events completed by it. */
  push(chunk: string): SseEvent[] {
    const out: SseEvent[] = [];
    let text = chunk;
    if (this.sawCr && text.startsWith('\n')) text = text.slice(1);
    this.sawCr = false;
    this.buffer += text;
    let start = 0;
    for (let i = 0; i < this.buffer.length; i++) {
      const c = this.buffer[i];
      if (c !== '\n' && c !== '\r') continue;
      this.line(this.buffer.slice(start, i), out);
      if (c === '\r') {
        if (i + 1 < this.buffer.length) {
          if (this.buffer[i + 1] === '\n') i++;
        } else {
          this.sawCr = true;
        }
      }
      start = i + 1;
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  /** End of body: an unterminated last event is dropped, as the spec says. */
  end(): SseEvent[] {
    this.buffer = '';
    this.data = [];
    this.event = '';
    return [];
  }

  private line(line: string, out: SseEvent[]): void {
    if (line === '') {
      if (this.data.length > 0) {
        const ev: SseEvent = { event: this.event || 'message', data: this.data.join('\n') };
        if (this.id !== undefined) ev.id = this.id;
        out.push(ev);
      }
      this.data = [];
      this.event = '';
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.id = value;
  }
}
