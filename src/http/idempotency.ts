import { createHash } from 'node:crypto';
import { and, eq, lt, sql } from 'drizzle-orm';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { idempotencyKeys } from '../db/schema/index.js';
import { ApiError, badRequest, conflict } from './errors.js';

const TTL_HOURS = 24;
const HEADER = 'idempotency-key';

declare module 'fastify' {
  interface FastifyRequest {
    /** The claimed idempotency row of this request, if it carries an Idempotency-Key. */
    idempotencyId: number | null;
  }
}

/** A JSON value with its object keys sorted: the same body sent with its keys in another order hashes the same. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value ?? null);
}

const requestHash = (request: FastifyRequest, body: string): string =>
  createHash('sha256').update(`${request.method} ${request.url}\n${body}`).digest('hex');

const isMultipart = (request: FastifyRequest) =>
  String(request.headers['content-type'] ?? '').startsWith('multipart/');

/** How long a claimed key is held for its first request: past a blocking reply's longest wait. */
const lockMs = (config: { replyTimeoutMs: number }) => config.replyTimeoutMs + 60_000;

/**
 * Idempotency-Key on every POST (issue 9): the first request's status and body are stored for 24
 * hours per API key and replayed to repeats with the same body; a different body is 422; a repeat
 * while the first is still running is 409. Streaming requests record a `streamRef` (see
 * `setIdempotentStream`) so a repeat can reattach instead. A multipart body is read by its route,
 * after this hook: that route claims the key once it has read the form
 * (`claimIdempotencyAfterBody`), so a repeat with another file is a 422 too.
 */
export function registerIdempotency(app: FastifyInstance) {
  const { database, secrets } = app.deps;
  app.decorateRequest('idempotencyId', null);
  app.decorateRequest('idempotencyStream', null);
  app.decorateRequest('idempotencyStreamAfter', 0);

  app.addHook('preHandler', async (request, reply) => {
    // Most requests carry no key: nothing to hash, nothing to look up.
    if (request.method !== 'POST' || request.headers[HEADER] === undefined || isMultipart(request)) return;
    return claim(request, reply, canonicalJson(request.body));
  });

  app.addHook('onSend', async (request, reply, payload) => {
    const id = request.idempotencyId;
    if (id === null || reply.getHeader('idempotent-replayed')) return payload;
    request.idempotencyId = null;
    if (reply.statusCode >= 500 || reply.statusCode === 409 || reply.statusCode === 429) {
      // Not an answer to keep (our failure, a concurrent conflict, a rate limit): a retry runs the request again.
      await database.db.delete(idempotencyKeys).where(eq(idempotencyKeys.id, id));
      return payload;
    }
    await database.db
      .update(idempotencyKeys)
      .set({
        state: 'completed',
        statusCode: reply.statusCode,
        contentType: String(reply.getHeader('content-type') ?? 'application/json'),
        // Encrypted: a first response may hold a secret shown once (an API key, a webhook secret).
        responseBody: secrets.encrypt(
          typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : '',
        ),
      })
      .where(eq(idempotencyKeys.id, id));
    return payload;
  });
}

/**
 * For a route that reads its body itself (a multipart upload): claims the request's
 * Idempotency-Key with a digest of what it read. True when a stored answer was sent instead (the
 * route then returns the reply as is).
 */
export async function claimIdempotencyAfterBody(
  request: FastifyRequest,
  reply: FastifyReply,
  bodyDigest: string,
): Promise<boolean> {
  await claim(request, reply, `multipart:${bodyDigest}`);
  return reply.sent;
}

/** Claims the request's Idempotency-Key for `body`, or answers the repeat (replay, 409, 422). */
async function claim(
  request: FastifyRequest,
  reply: FastifyReply,
  body: string,
): Promise<FastifyReply | undefined> {
  const { database, secrets, config } = request.server.deps;
  const key = request.headers[HEADER];
  if (request.method !== 'POST' || key === undefined || !request.principal) return;
  if (typeof key !== 'string' || key.length === 0 || key.length > 255) {
    throw badRequest('Idempotency-Key must be 1 to 255 characters', { 'Idempotency-Key': ['is invalid'] });
  }
  const keyId = request.principal.keyId;
  const hash = requestHash(request, body);
  const db = database.db;
  await db
    .delete(idempotencyKeys)
    .where(
      and(
        eq(idempotencyKeys.apiKeyId, keyId),
        eq(idempotencyKeys.key, key),
        lt(idempotencyKeys.createdAt, sql`now() - make_interval(hours => ${TTL_HOURS})`),
      ),
    );
  const lockedUntil = sql`now() + make_interval(secs => ${lockMs(config) / 1000})`;
  const [claimed] = await db
    .insert(idempotencyKeys)
    .values({ apiKeyId: keyId, key, requestHash: hash, state: 'running', lockedUntil })
    .onConflictDoNothing()
    .returning({ id: idempotencyKeys.id });
  if (claimed) {
    request.idempotencyId = claimed.id;
    return;
  }
  const [row] = await db
    .select({
      id: idempotencyKeys.id,
      requestHash: idempotencyKeys.requestHash,
      state: idempotencyKeys.state,
      statusCode: idempotencyKeys.statusCode,
      contentType: idempotencyKeys.contentType,
      responseBody: idempotencyKeys.responseBody,
      streamRef: idempotencyKeys.streamRef,
      expired: sql<boolean>`${idempotencyKeys.lockedUntil} < now()`,
    })
    .from(idempotencyKeys)
    .where(and(eq(idempotencyKeys.apiKeyId, keyId), eq(idempotencyKeys.key, key)));
  if (!row)
    throw conflict(
      'The request with this Idempotency-Key is being retried; try again',
      'idempotency_conflict',
    );
  if (row.requestHash !== hash) {
    throw new ApiError(
      422,
      'idempotency_key_reused',
      'This Idempotency-Key was used with a different request',
      { 'Idempotency-Key': ['was used with a different request'] },
    );
  }
  if (row.state === 'completed' && row.statusCode !== null) {
    reply.header('idempotent-replayed', 'true');
    if (row.contentType) reply.type(row.contentType);
    return reply.status(row.statusCode).send(row.responseBody ? secrets.decrypt(row.responseBody) : '');
  }
  if (row.streamRef) {
    request.idempotencyStream = row.streamRef;
    request.idempotencyStreamAfter = lastEventIdOf(request);
    return;
  }
  if (!row.expired) {
    throw conflict('A request with this Idempotency-Key is still running', 'idempotency_request_in_progress');
  }
  // The first attempt's process died mid-request: this repeat takes the key over.
  await db
    .update(idempotencyKeys)
    .set({ lockedUntil, state: 'running' })
    .where(eq(idempotencyKeys.id, row.id));
  request.idempotencyId = row.id;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set when this request repeats a streaming request: the stream to reattach to. */
    idempotencyStream: string | null;
    /** With `idempotencyStream`: replay only the events after this id (the Last-Event-ID header; 0: all). */
    idempotencyStreamAfter: number;
  }
}

/**
 * The Last-Event-ID header as an event id (0 when absent). It matters only to a repeated idempotent
 * streamed POST: a new POST always starts a new stream, whatever the header says.
 */
function lastEventIdOf(request: FastifyRequest): number {
  const header = request.headers['last-event-id'];
  if (header === undefined) return 0;
  const value = (Array.isArray(header) ? header[0] : header).trim();
  if (!/^\d{1,9}$/.test(value)) {
    throw badRequest('Last-Event-ID must be the id of an event of this stream (a non-negative integer)', {
      'Last-Event-ID': ['must be a non-negative integer'],
    });
  }
  return Number(value);
}

/**
 * Gives up this request's claim on its Idempotency-Key without storing an answer (a streamed
 * refusal that a retry should not replay, e.g. a 409 event), so a repeat runs the request again.
 */
export async function releaseIdempotencyKey(request: FastifyRequest): Promise<void> {
  const id = request.idempotencyId;
  if (id === null) return;
  request.idempotencyId = null;
  await request.server.deps.database.db.delete(idempotencyKeys).where(eq(idempotencyKeys.id, id));
}

/**
 * Called by streaming routes once their stream exists, so a repeat of the request reattaches to it.
 * The key then stays claimed for 24 hours: repeats never start a second stream.
 */
export async function setIdempotentStream(request: FastifyRequest, streamRef: string): Promise<void> {
  const id = request.idempotencyId;
  if (id === null) return;
  request.idempotencyId = null;
  await request.server.deps.database.db
    .update(idempotencyKeys)
    .set({ streamRef, state: 'completed' })
    .where(eq(idempotencyKeys.id, id));
}
