import type { FastifyInstance } from 'fastify';
import type { AppDeps } from '../../http/context.js';
import { StreamHub } from './stream-hub.js';

const hubs = new WeakMap<AppDeps, StreamHub>();

/**
 * The app's one stream hub (chat turns and artifact streams share it, and its LISTEN connection),
 * created by the first module that asks and closed with the app.
 */
export function streamHubOf(app: FastifyInstance): StreamHub {
  const { deps } = app;
  const existing = hubs.get(deps);
  if (existing) return existing;
  const hub = new StreamHub(deps.database, app.log, deps.streamHub);
  hubs.set(deps, hub);
  // Readers of streams running elsewhere end first so they do not hold the shutdown up; their
  // clients reattach to another process with Last-Event-ID.
  app.addHook('preClose', async () => hub.detachRemote());
  app.addHook('onClose', async () => {
    hubs.delete(deps);
    await hub.close();
  });
  return hub;
}
