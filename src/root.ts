import type { FastifyBaseLogger } from 'fastify';
import { pino } from 'pino';
import type { Config } from './config.js';
import type { AppDeps } from './core/deps.js';
import { createSecretBox, resolveSecret, type SecretBox } from './crypto/secret-box.js';
import { type Database, migrateDatabase, openDatabase } from './db/client.js';
import { createJobQueue, type JobQueue, type JobQueueOptions, jobQueueDepth } from './jobs/queue.js';
import { DocumentExtractor } from './knowledge/extractor.js';
import { VectorStore } from './knowledge/vector-store.js';
import { ModelCache } from './llm/model-cache.js';
import { toolFamilies as allToolFamilies } from './llm/tools/index.js';
import type { ToolFamilies } from './llm/tools/registry.js';
import { DEFAULT_MCP_POOL_OPTIONS, McpPool } from './mcp/client-pool.js';
import { StreamHub, type StreamHubOptions } from './streams/stream-hub.js';
import { ServiceMetrics } from './telemetry/metrics.js';
import { ChatQueue } from './turns/queue.js';
import { DEFAULT_TURN_SETTINGS, TurnRunner, type TurnSettings } from './turns/runner.js';

/**
 * The composition root: every resource a process shares is built here, once, and passed down
 * explicitly (to the HTTP app as `app.deps`, to the job handlers, to services in their
 * ServiceContext). Nothing is created lazily behind a module-level map.
 *
 *   main.ts (server) ─┐
 *   cli.ts worker ────┼─> createRoot ─> database, secrets, jobs, streams, mcp, models, vectors,
 *   test helpers ─────┘                 toolFamilies, turns ─> buildApp / registerWorkers
 */
export interface Root extends AppDeps {
  /** Closes what the root built, in reverse order of building; resources given to it stay open. */
  close(): Promise<void>;
}

export interface RootOptions {
  log?: FastifyBaseLogger;
  /** Resources built elsewhere (tests share one database or queue between roots); not closed by this root. */
  database?: Database;
  jobs?: JobQueue;
  secrets?: SecretBox;
  /** Options of the job queue the root builds. */
  jobOptions?: Omit<JobQueueOptions, 'onError' | 'wakeups'>;
  /** Tool families offered to turns and generations; default: every family of src/llm/tools. */
  toolFamilies?: ToolFamilies;
  /** Stream hub timings (flush, poll, liveness); tests shorten them. */
  streamHub?: Partial<StreamHubOptions>;
  /** Chat turn timings (lease length, model idle limit, steps); tests shorten them. */
  turnSettings?: Partial<TurnSettings>;
}

/** The process's logger: JSON lines on stdout at LOG_LEVEL, keys never logged. */
export function createLogger(config: Pick<Config, 'logLevel'>): FastifyBaseLogger {
  return pino({ level: config.logLevel, redact: ['req.headers.authorization', 'headers.authorization'] });
}

export async function createRoot(config: Config, options: RootOptions = {}): Promise<Root> {
  const log = options.log ?? createLogger(config);
  const closers: { name: string; close: () => Promise<void> | void }[] = [];
  const owned = (name: string, close: () => Promise<void> | void) => closers.push({ name, close });
  const close = async () => {
    // Reverse order: the turn runner stops before the hub it publishes to, the queue before the
    // pools its jobs use, the database last.
    for (const { name, close } of closers.splice(0).reverse()) {
      try {
        await close();
      } catch (err) {
        log.error({ err, resource: name }, 'could not close a resource');
      }
    }
  };

  try {
    let database = options.database;
    if (!database) {
      const opened = await openDatabase(config);
      database = opened;
      owned('database', () => opened.close());
      await migrateDatabase(opened);
    }

    let secrets = options.secrets;
    if (!secrets) {
      const secret = resolveSecret(config.secretKey, config.dataDir);
      if (secret.generated && database.kind === 'postgres') {
        log.warn(
          'SECRET_KEY is not set: using a key generated in DATA_DIR; set SECRET_KEY when several processes share the database',
        );
      }
      secrets = createSecretBox(secret.secret);
    }

    const metrics = new ServiceMetrics({ queueDepth: () => jobQueueDepth(database) });
    const models = new ModelCache(secrets, config);
    owned('models', () => models.close());
    const vectors = new VectorStore(database, log);
    const extractor = new DocumentExtractor();
    owned('extractor', () => extractor.close());
    const mcp = new McpPool({ ...DEFAULT_MCP_POOL_OPTIONS, allowPrivate: config.outboundAllowPrivate });
    owned('mcp', () => mcp.close());
    const streams = new StreamHub(database, log, options.streamHub);
    owned('streams', () => streams.close());

    let jobs = options.jobs;
    if (!jobs) {
      const queue = await createJobQueue(database, {
        // Jobs and tasks are woken by NOTIFY (from any process); idle queues are not polled.
        wakeups: streams.notifier,
        ...options.jobOptions,
        onError: (err) => log.error({ err }, 'background job queue error'),
      });
      jobs = queue;
      owned('jobs', () => queue.stop());
    }

    const families = options.toolFamilies ?? allToolFamilies;
    const turns = new TurnRunner({
      database,
      streams,
      families,
      settings: {
        ...DEFAULT_TURN_SETTINGS,
        leaseMs: config.turnLeaseMs,
        modelIdleMs: config.modelIdleTimeoutMs,
        earlyRequests: config.earlyModelRequests,
        ...options.turnSettings,
      },
      log,
      countEarlyRequest: (outcome) => metrics.countEarlyRequest(outcome),
    });
    // Turns still running when the process stops are cancelled and recorded (the HTTP app gives
    // them the grace period first, see src/app.ts).
    owned('turns', () => turns.close(0));
    // Closed before the turns: no queued message starts on a process that is stopping.
    const chatQueue = new ChatQueue({
      resources: { config, database, secrets, models, mcp, vectors, metrics },
      streams,
      turns,
      log,
    });
    owned('chatQueue', () => chatQueue.close());

    return {
      config,
      log,
      database,
      secrets,
      jobs,
      streams,
      mcp,
      models,
      vectors,
      extractor,
      metrics,
      toolFamilies: families,
      turns,
      chatQueue,
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
