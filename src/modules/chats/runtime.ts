import type { FastifyInstance } from 'fastify';
import { toolFamilies } from '../../llm/tools/index.js';
import { streamHubOf } from '../streams/app-hub.js';
import type { StreamHub } from '../streams/stream-hub.js';
import { StoredTurnEventHub } from './stored-turn-events.js';
import type { TurnEventHub } from './turn-events.js';
import { DEFAULT_TURN_SETTINGS, TurnRunner, type TurnSettings } from './turn-runner.js';

/** What the chat routes share within one app: where turns run and where their events go. */
export interface ChatRuntime {
  runner: TurnRunner;
  hub: TurnEventHub;
  /** The app's stream hub (one-off streams, LISTEN/NOTIFY between processes). */
  streams: StreamHub;
  settings: TurnSettings;
}

// Time left, after turns were given their chance to finish, to record cancellations before main.ts exits.
const CANCEL_MARGIN_MS = 3_000;

export function createChatRuntime(app: FastifyInstance): ChatRuntime {
  const { deps } = app;
  const streams = streamHubOf(app);
  const hub = deps.turnEvents ?? new StoredTurnEventHub(streams);
  const settings = { ...DEFAULT_TURN_SETTINGS, ...deps.turnSettings };
  const runner = new TurnRunner({
    database: deps.database,
    hub,
    families: deps.toolFamilies ?? toolFamilies,
    settings,
    log: app.log,
    notifier: streams.notifier,
  });
  // preClose runs before the server waits for open connections, so streams of running turns end
  // (with their reply, or a cancellation) instead of holding the shutdown up.
  app.addHook('preClose', async () => {
    await runner.close(Math.max(0, deps.config.shutdownGraceMs - CANCEL_MARGIN_MS));
  });
  return { runner, hub, streams, settings };
}
