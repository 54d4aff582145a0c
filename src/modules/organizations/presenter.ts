import type { OrganizationRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { Organization } from './schemas.js';

export const presentOrganization = (row: OrganizationRow): Organization => ({
  id: row.id,
  name: row.name,
  active: row.active,
  credit_balance: Number(row.creditBalance),
  default_model_configuration_id: row.defaultModelConfigurationId,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
