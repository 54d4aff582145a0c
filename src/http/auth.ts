import { and, eq, isNull, or, sql } from 'drizzle-orm';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Principal } from '../core/principal.js';
import { PRINCIPALS_CHANNEL, PrincipalCache } from '../core/principal-cache.js';
import type { Database } from '../db/client.js';
import { apiKeys, organizations, users } from '../db/schema/index.js';
import { hashKey } from '../modules/api-keys/secrets.js';
import type { Notifier } from '../streams/notifier.js';
import { ApiError, familyOf, forbidden, unauthorized } from './errors.js';

/**
 * Who may call a route: `organization` (default for /api) = organization and personal keys;
 * `any_key` = those and super admin keys (a read that serves both, e.g. the audit log).
 */
export type Access = 'public' | 'organization' | 'super_admin' | 'any_key';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null;
    /** SHA-256 of the request's bearer token (`keyHashOf`): computed once, for the rate limit and authentication. */
    keyHash: string | null;
  }
  interface FastifyContextConfig {
    access?: Access;
  }
}

const LAST_USED_EVERY_MS = 60_000;

function bearerToken(header: string | undefined): string | null {
  if (!header) return null;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match ? match[1] : null;
}

/**
 * The stored form of the request's API key (its SHA-256), or null without a bearer token. Both the
 * rate limit's key and authentication need it: computed on first use, kept on the request.
 */
export function keyHashOf(request: FastifyRequest): string | null {
  if (request.keyHash !== null) return request.keyHash;
  const token = bearerToken(request.headers.authorization);
  if (!token) return null;
  request.keyHash = hashKey(token);
  return request.keyHash;
}

interface KeyRow {
  id: number;
  kind: Principal['kind'];
  organizationId: number | null;
  userId: number | null;
  role: 'admin' | 'member' | null;
}

/**
 * Resolves `Authorization: Bearer` to a principal, with the 401/403 rules of each API family.
 * Keys are cached (core/principal-cache.ts): for at most a second, or 60 s while the notifier
 * holds a live LISTEN on the principals channel; dropped at once when it announces a change of
 * keys, users or organizations.
 */
export function authenticate(
  database: Database,
  notifier?: Notifier,
  /** Called before a key nobody holds is refused; may throw instead (the caller's rate limit). */
  onUnknownKey?: (request: FastifyRequest, reply: FastifyReply) => Promise<void>,
) {
  const cache = new PrincipalCache<KeyRow>(database.db);
  if (notifier) {
    // Entries are trusted past 1 s only while the LISTEN is live; losing or regaining it drops them.
    notifier.onListening(PRINCIPALS_CHANNEL, (live) => cache.setListening(live));
    notifier.onReconnect(() => cache.clear());
    void notifier.listen(PRINCIPALS_CHANNEL, () => cache.clear()).catch(() => {});
  }
  const load = async (keyHash: string, request: FastifyRequest): Promise<KeyRow | null> => {
    const [row] = await database.db
      .select({
        id: apiKeys.id,
        kind: apiKeys.kind,
        organizationId: apiKeys.organizationId,
        userId: apiKeys.userId,
        lastUsedAt: apiKeys.lastUsedAt,
        recentlyUsed: sql<boolean>`${apiKeys.lastUsedAt} > now() - make_interval(secs => ${LAST_USED_EVERY_MS / 1000})`,
        role: users.role,
      })
      .from(apiKeys)
      .leftJoin(organizations, eq(organizations.id, apiKeys.organizationId))
      .leftJoin(users, eq(users.id, apiKeys.userId))
      .where(
        and(
          eq(apiKeys.keyHash, keyHash),
          isNull(apiKeys.revokedAt),
          or(isNull(apiKeys.organizationId), eq(organizations.active, true)),
          or(isNull(apiKeys.userId), isNull(users.deletedAt)),
        ),
      )
      .limit(1);
    if (!row) return null;
    if (!row.recentlyUsed) {
      // Best effort and throttled: a failed bookkeeping write must not fail the request.
      database.db
        .update(apiKeys)
        .set({ lastUsedAt: sql`now()` })
        .where(eq(apiKeys.id, row.id))
        .catch((err) => request.log.warn({ err }, 'could not record key use'));
    }
    return {
      id: row.id,
      kind: row.kind,
      organizationId: row.organizationId,
      userId: row.userId,
      role: row.role,
    };
  };
  return async function authHook(request: FastifyRequest, reply: FastifyReply) {
    const family = familyOf(request.url);
    const access: Access =
      request.routeOptions.config?.access ?? (family === 'plain' ? 'public' : 'organization');
    // Unknown routes answer 404 whatever the key.
    if (access === 'public' || !request.routeOptions.url) return;

    // Cached by the key's hash, as stored: the cache holds no usable key.
    const keyHash = keyHashOf(request);
    if (keyHash === null)
      throw unauthorized('Missing API key: send Authorization: Bearer <API_KEY>', 'missing_api_key');
    const row = await cache.resolve(keyHash, () => load(keyHash, request));

    if (!row) {
      await onUnknownKey?.(request, reply);
      // Spec 5: an invalid or revoked key is 403 on chat endpoints, 401 on v1 (DESIGN.md 4).
      const status = family === 'v2' ? 403 : 401;
      throw new ApiError(status, 'invalid_api_key', 'Invalid or revoked API key');
    }
    if (access === 'super_admin' && row.kind !== 'super_admin')
      throw forbidden('This endpoint requires a super admin key');
    if (access === 'organization' && row.kind === 'super_admin') {
      throw forbidden('Super admin keys act on /api/v1/admin endpoints only');
    }

    request.principal = {
      kind: row.kind,
      keyId: row.id,
      organizationId: row.organizationId,
      userId: row.userId,
      role:
        row.kind === 'super_admin'
          ? 'super_admin'
          : row.kind === 'organization'
            ? 'admin'
            : (row.role ?? 'member'),
    };
  };
}
