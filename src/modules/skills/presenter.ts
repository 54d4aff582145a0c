import type { SkillRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { Skill } from './schemas.js';

export const slashCommandOf = (slug: string) => `/${slug}`;

export const presentSkill = (row: SkillRow, artifactTypeIds: number[]): Skill => ({
  id: row.id,
  name: row.name,
  content: row.content,
  description: row.description,
  custom_variables: row.customVariables.map((v) => ({
    name: v.name,
    description: v.description,
    type: v.type,
  })),
  slash_command: slashCommandOf(row.slug),
  artifact_type_ids: artifactTypeIds,
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
});
