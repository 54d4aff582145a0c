import { count, desc, eq, sql } from 'drizzle-orm';
import { type AuditActor, recordAudit } from '../../audit/record.js';
import type { Config } from '../../config.js';
import { principalsChanged } from '../../core/principal-cache.js';
import type { SecretBox } from '../../crypto/secret-box.js';
import type { Db, Queryable } from '../../db/client.js';
import { creditLedger, groupMembers, groups, organizations, users } from '../../db/schema/index.js';
import { notFound, unprocessable } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { insertApiKey } from '../api-keys/service.js';
import { insertDefaultModelConfiguration } from '../model-configurations/defaults.js';

export interface OrgDeps {
  config: Config;
  secrets: SecretBox;
}

export interface NewOrganization {
  name: string;
  email: string;
  userName?: string;
}

/** An organization with everything it needs to work: default group, admin user, default model, a key. */
export async function createOrganization(tx: Queryable, deps: OrgDeps, input: NewOrganization) {
  const credits = deps.config.defaultOrgCredits;
  const [organization] = await tx
    .insert(organizations)
    .values({ name: input.name, creditBalance: credits })
    .returning();
  if (credits !== 0) {
    await tx.insert(creditLedger).values({ organizationId: organization.id, kind: 'grant', amount: credits });
  }
  const [group] = await tx
    .insert(groups)
    .values({ organizationId: organization.id, name: 'Default', description: 'Everyone', isDefault: true })
    .returning({ id: groups.id });
  const [user] = await tx
    .insert(users)
    .values({
      organizationId: organization.id,
      email: input.email,
      name: input.userName ?? '',
      role: 'admin',
    })
    .returning();
  await tx.insert(groupMembers).values({ groupId: group.id, userId: user.id });
  const modelConfigurationId = await insertDefaultModelConfiguration(tx, deps, organization.id);
  const [updated] = await tx
    .update(organizations)
    .set({ defaultModelConfigurationId: modelConfigurationId })
    .where(eq(organizations.id, organization.id))
    .returning();
  const key = await insertApiKey(tx, {
    organizationId: organization.id,
    userId: null,
    kind: 'organization',
    name: 'Initial organization key',
  });
  return { organization: updated, user, defaultGroupId: group.id, modelConfigurationId, orgKey: key.secret };
}

/** A super admin's create: the organization and its audit record in one transaction. */
export function createOrganizationAs(db: Db, deps: OrgDeps, actor: AuditActor, input: NewOrganization) {
  return db.transaction(async (tx) => {
    const created = await createOrganization(tx, deps, input);
    await recordAudit(tx, actor, {
      organizationId: created.organization.id,
      action: 'organization.created',
      resource: { type: 'organization', id: created.organization.id },
      changedFields: ['name', 'user'],
    });
    return created;
  });
}

export async function listOrganizations(db: Db, page: PageQuery) {
  const [rows, [{ total }]] = await Promise.all([
    db
      .select()
      .from(organizations)
      .orderBy(desc(organizations.id))
      .limit(page.page_size)
      .offset(offsetOf(page)),
    db.select({ total: count() }).from(organizations),
  ]);
  return { rows, total };
}

export async function getOrganization(db: Queryable, id: number) {
  const [row] = await db.select().from(organizations).where(eq(organizations.id, id));
  if (!row) throw notFound('Organization');
  return row;
}

export async function renameOrganization(db: Db, actor: AuditActor, id: number, name: string | undefined) {
  if (name === undefined) return getOrganization(db, id);
  return db.transaction(async (tx) => {
    const [row] = await tx
      .update(organizations)
      .set({ name, updatedAt: sql`now()` })
      .where(eq(organizations.id, id))
      .returning();
    if (!row) throw notFound('Organization');
    await recordAudit(tx, actor, {
      organizationId: id,
      action: 'organization.updated',
      resource: { type: 'organization', id },
      changedFields: ['name'],
    });
    return row;
  });
}

/** Deactivation keeps every row; the organization's keys stop working at once (see http/auth.ts). */
export async function deactivateOrganization(db: Db, actor: AuditActor, id: number) {
  const row = await db.transaction(async (tx) => {
    const [row] = await tx
      .update(organizations)
      .set({
        active: false,
        deactivatedAt: sql`coalesce(${organizations.deactivatedAt}, now())`,
        updatedAt: sql`now()`,
      })
      .where(eq(organizations.id, id))
      .returning();
    if (!row) throw notFound('Organization');
    await recordAudit(tx, actor, {
      organizationId: id,
      action: 'organization.deactivated',
      resource: { type: 'organization', id },
      changedFields: ['active'],
    });
    return row;
  });
  principalsChanged(db);
  return row;
}

export async function addCredits(db: Db, actor: AuditActor, id: number, amount: number) {
  if (amount === 0 || !Number.isFinite(amount))
    throw unprocessable('amount must not be zero', { amount: ['must not be zero'] });
  return db.transaction(async (tx) => {
    const [row] = await tx
      .update(organizations)
      .set({ creditBalance: sql`${organizations.creditBalance} + ${amount}`, updatedAt: sql`now()` })
      .where(eq(organizations.id, id))
      .returning();
    if (!row) throw notFound('Organization');
    await tx.insert(creditLedger).values({ organizationId: id, kind: 'grant', amount });
    await recordAudit(tx, actor, {
      organizationId: id,
      action: 'organization.credits_added',
      resource: { type: 'organization', id },
      changedFields: ['credit_balance'],
    });
    return row;
  });
}
