import type { Principal } from '../core/principal.js';
import type { Queryable } from '../db/client.js';
import { auditEvents } from '../db/schema/index.js';

/**
 * What an audit record names. A new family of writes (tool-approval decisions, say) adds its
 * resource type here and calls `recordAudit` in the transaction that makes its change.
 */
export const AUDIT_RESOURCE_TYPES = [
  'organization',
  'user',
  'api_key',
  'group',
  'category',
  'project',
  'artifact_type',
  'artifact',
  'skill',
  'agent',
  'model_configuration',
  'integration',
  'webhook',
  'document',
  'chat',
  'tool_approval',
] as const;
export type AuditResourceType = (typeof AUDIT_RESOURCE_TYPES)[number];

/** `<resource type>.<past-tense verb>`, e.g. `project.updated`, `organization.credits_added`. */
export type AuditAction = `${AuditResourceType}.${string}`;

/** Who acts: the caller's key, and the request that carried the change (`x-request-id`). */
export interface AuditActor {
  principal: Principal;
  requestId: string | null;
}

export interface AuditEntry {
  action: AuditAction;
  resource: { type: AuditResourceType; id: number };
  /** Names of the fields the write set; never their values (secrets among them). */
  changedFields?: readonly string[];
  /** The organization the change belongs to; defaults to the actor's (super admins name it). */
  organizationId?: number;
}

/**
 * Records a change. Call it with the transaction that makes the change: the record then exists
 * exactly when the change does (a rolled-back write leaves no record).
 */
export async function recordAudit(tx: Queryable, actor: AuditActor, entry: AuditEntry): Promise<void> {
  const organizationId = entry.organizationId ?? actor.principal.organizationId;
  if (organizationId === null) throw new Error(`audit ${entry.action}: no organization`);
  await tx.insert(auditEvents).values({
    organizationId,
    actorApiKeyId: actor.principal.keyId,
    actorKind: actor.principal.kind,
    actorUserId: actor.principal.userId,
    action: entry.action,
    resourceType: entry.resource.type,
    resourceId: entry.resource.id,
    changedFields: [...new Set(entry.changedFields ?? [])].sort(),
    requestId: actor.requestId,
  });
}

/** The fields a request body sets: its keys with a value other than `undefined`. */
export function fieldsOf(body: object | null | undefined): string[] {
  if (!body) return [];
  return Object.entries(body)
    .filter(([, value]) => value !== undefined)
    .map(([key]) => key);
}
