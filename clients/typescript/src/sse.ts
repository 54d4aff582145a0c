import { EventSourceParserStream } from 'eventsource-parser/stream';

export interface RawEvent {
  id: number | null;
  event: string;
  data: unknown;
}

/** The events of a `text/event-stream` body, data parsed as JSON. Rejects when the connection breaks. */
export async function* readEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<RawEvent> {
  const reader = body
    .pipeThrough(new TextDecoderStream())
    .pipeThrough(new EventSourceParserStream())
    .getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      yield {
        id: value.id !== undefined && /^\d+$/.test(value.id) ? Number(value.id) : null,
        event: value.event ?? 'message',
        data: value.data ? JSON.parse(value.data) : null,
      };
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

export const isEventStream = (response: Response) =>
  (response.headers.get('content-type') ?? '').startsWith('text/event-stream');
