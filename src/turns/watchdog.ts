import type { Tool } from 'ai';

/** Fails a turn whose model stays silent; paused while tools run (they have their own limits). */
export class IdleWatchdog {
  private timer: NodeJS.Timeout | undefined;
  /** When the model was last heard from; the one timer re-arms itself from it (no timer per touch). */
  private lastActivity = 0;
  private toolsRunning = 0;
  private stopped = false;
  private readonly toolStarts = new Map<string, number>();
  private readonly toolTimes = new Map<string, number>();

  constructor(
    private readonly idleMs: number,
    private readonly onIdle: () => void,
  ) {}

  start(): void {
    this.touch();
  }

  touch(): void {
    this.lastActivity = performance.now();
    if (this.stopped || this.toolsRunning > 0 || this.timer) return;
    this.arm(this.idleMs);
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.stopped || this.toolsRunning > 0) return;
      const silent = performance.now() - this.lastActivity;
      if (silent >= this.idleMs) this.onIdle();
      else this.arm(this.idleMs - silent);
    }, ms);
    this.timer.unref();
  }

  private disarm(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  toolStarted(toolCallId: string): void {
    this.toolsRunning += 1;
    this.toolStarts.set(toolCallId, performance.now());
    this.disarm();
  }

  toolFinished(toolCallId: string): void {
    this.toolsRunning = Math.max(0, this.toolsRunning - 1);
    const started = this.toolStarts.get(toolCallId);
    if (started !== undefined) this.toolTimes.set(toolCallId, Math.round(performance.now() - started));
    this.touch();
  }

  /** The measured run time of a tool call (0 when it never ran, e.g. invalid input). */
  takeToolTime(toolCallId: string): number {
    const ms = this.toolTimes.get(toolCallId) ?? 0;
    this.toolTimes.delete(toolCallId);
    this.toolStarts.delete(toolCallId);
    return ms;
  }

  stop(): void {
    this.stopped = true;
    this.disarm();
  }
}

/** Wraps each tool so its run time is measured and the idle watchdog waits for it. */
export function pausingWatchdog(tools: Record<string, Tool>, watchdog: IdleWatchdog): Record<string, Tool> {
  const wrapped: Record<string, Tool> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const execute = tool.execute;
    wrapped[name] = execute
      ? {
          ...tool,
          execute: async (input: unknown, options: { toolCallId: string }) => {
            watchdog.toolStarted(options.toolCallId);
            try {
              return await execute.call(tool, input, options as never);
            } finally {
              watchdog.toolFinished(options.toolCallId);
            }
          },
        }
      : tool;
  }
  return wrapped;
}
