import type { AgentRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { Agent } from './schemas.js';

export interface AgentLinks {
  skillIds: number[];
  groupIds: number[];
}

export const presentAgent = (row: AgentRow, links: AgentLinks): Agent => ({
  id: row.id,
  name: row.name,
  instructions: row.instructions,
  model_configuration_id: row.modelConfigurationId,
  skill_ids: links.skillIds,
  group_ids: links.groupIds,
  tools: row.tools,
  tools_requiring_approval: row.toolsRequiringApproval,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
