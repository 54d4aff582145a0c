import type { FastifyInstance } from 'fastify';
import { toolFamilies } from '../../llm/tools/index.js';
import { InProcessTurnEventHub, type TurnEventHub } from './turn-events.js';
import { DEFAULT_TURN_SETTINGS, TurnRunner } from './turn-runner.js';

/** What the chat routes share within one app: where turns run and where their events go. */
export interface ChatRuntime {
  runner: TurnRunner;
  hub: TurnEventHub;
}

// Time left, after turns were given their chance to finish, to record cancellations before main.ts exits.
const CANCEL_MARGIN_MS = 3_000;

export function createChatRuntime(app: FastifyInstance): ChatRuntime {
  const { deps } = app;
  const ownHub = deps.turnEvents ? null : new InProcessTurnEventHub();
  const hub = deps.turnEvents ?? (ownHub as TurnEventHub);
  const runner = new TurnRunner({
    database: deps.database,
    hub,
    families: deps.toolFamilies ?? toolFamilies,
    settings: { ...DEFAULT_TURN_SETTINGS, ...deps.turnSettings },
    log: app.log,
  });
  // preClose runs before the server waits for open connections, so streams of running turns end
  // (with their reply, or a cancellation) instead of holding the shutdown up.
  app.addHook('preClose', async () => {
    await runner.close(Math.max(0, deps.config.shutdownGraceMs - CANCEL_MARGIN_MS));
  });
  app.addHook('onClose', async () => {
    ownHub?.clear();
  });
  return { runner, hub };
}
