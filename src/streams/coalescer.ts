/**
 * Adaptive coalescing of a stream's text deltas (issue 14): a delta is published at once when
 * none was published in the current turn of the event loop, so an idle process sends every token
 * as it comes and the first token is never held back. Deltas that arrive after one was published
 * and before the event loop came round (`setImmediate`: the process is busy, or the model sent
 * several in one read) are merged into the next `content` event. So events are numbered, sent and
 * stored at one granularity: what a client reads live is what a reattaching client replays.
 */
export class ContentCoalescer {
  private buffered = '';
  private windowOpen = false;

  constructor(private readonly emit: (text: string) => void) {}

  /** Publishes `text` now, or merges it into the delta published when the event loop comes round. */
  push(text: string): void {
    if (this.windowOpen) {
      this.buffered += text;
      return;
    }
    this.open();
    this.emit(text);
  }

  /** Publishes what is merged now (before any other event of the stream, so order is kept). */
  flush(): void {
    if (!this.buffered) return;
    const text = this.buffered;
    this.buffered = '';
    this.emit(text);
  }

  private open(): void {
    this.windowOpen = true;
    setImmediate(() => {
      this.windowOpen = false;
      if (!this.buffered) return;
      // Something merged: publish it, and keep merging until a turn of the loop brings nothing.
      this.open();
      this.flush();
    });
  }
}
