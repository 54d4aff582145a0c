import type { StreamEventOf } from './protocol.js';
import type { StreamHub } from './stream-hub.js';

/**
 * Numbers one stream's events 1, 2, 3... and hands them to the hub: the only way chat turns and
 * artifact streams publish. Opening the stream at once lets readers find it before its first event.
 */
export class StreamPublisher<E extends StreamEventOf = StreamEventOf> {
  private seq = 0;

  constructor(
    private readonly hub: StreamHub,
    readonly key: string,
  ) {
    hub.open(key);
  }

  get lastSeq(): number {
    return this.seq;
  }

  /** Subscribers in this process get the event before this returns; a final event resolves once stored. */
  publish(event: E): Promise<void> {
    this.seq += 1;
    return this.hub.publish(this.key, this.seq, event.name, event.data);
  }
}
