import type { Tool } from 'ai';

/** Fails a turn whose model stays silent; paused while tools run (they have their own limits). */
export class IdleWatchdog {
  private timer: NodeJS.Timeout | undefined;
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
    clearTimeout(this.timer);
    if (this.stopped || this.toolsRunning > 0) return;
    this.timer = setTimeout(this.onIdle, this.idleMs);
    this.timer.unref();
  }

  toolStarted(toolCallId: string): void {
    this.toolsRunning += 1;
    this.toolStarts.set(toolCallId, performance.now());
    clearTimeout(this.timer);
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
    clearTimeout(this.timer);
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
