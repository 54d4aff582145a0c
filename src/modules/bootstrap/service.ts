import { sql } from 'drizzle-orm';
import type { Database } from '../../db/client.js';
import { projectGroups, projects } from '../../db/schema/index.js';
import { insertApiKey } from '../api-keys/service.js';
import { createOrganization, type OrgDeps } from '../organizations/service.js';

/** The exact object of DESIGN.md section 3; outside tests read it. */
export interface BootstrapResult {
  organization_id: number;
  user_id: number;
  default_group_id: number;
  project_id: number;
  model_configuration_id: number;
  super_admin_key: string;
  organization_key: string;
  personal_key: string;
}

export class NotEmptyError extends Error {}

export async function bootstrap(
  database: Database,
  deps: OrgDeps,
  options: { email?: string; organization?: string } = {},
): Promise<BootstrapResult> {
  return database.db.transaction(async (tx) => {
    // Serialises concurrent bootstraps (two processes starting on one empty PostgreSQL).
    await tx.execute(sql`select pg_advisory_xact_lock(7265618)`);
    const existing = await tx.query.organizations.findFirst({ columns: { id: true } });
    if (existing)
      throw new NotEmptyError('The database already holds an organization; bootstrap runs only once');
    const created = await createOrganization(tx, deps, {
      name: options.organization ?? 'Default organization',
      email: options.email ?? 'admin@example.com',
      userName: 'Admin',
    });
    const [project] = await tx
      .insert(projects)
      .values({ organizationId: created.organization.id, name: 'Default project', overview: '' })
      .returning({ id: projects.id });
    await tx.insert(projectGroups).values({ projectId: project.id, groupId: created.defaultGroupId });
    const personal = await insertApiKey(tx, {
      organizationId: created.organization.id,
      userId: created.user.id,
      kind: 'personal',
      name: 'Admin personal key',
    });
    const superAdmin = await insertApiKey(tx, {
      organizationId: null,
      userId: null,
      kind: 'super_admin',
      name: 'Super admin key',
    });
    return {
      organization_id: created.organization.id,
      user_id: created.user.id,
      default_group_id: created.defaultGroupId,
      project_id: project.id,
      model_configuration_id: created.modelConfigurationId,
      super_admin_key: superAdmin.secret,
      organization_key: created.orgKey,
      personal_key: personal.secret,
    };
  });
}
