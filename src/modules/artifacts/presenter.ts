import type { Config } from '../../config.js';
import { formatTimestamp } from '../../http/timestamps.js';
import type { ArtifactUsage } from './generation.js';
import type { ArtifactRecord } from './lookup.js';
import type { Artifact } from './schemas.js';

/** The public page of an artifact (DESIGN.md 4). */
export const shareUrl = (config: Pick<Config, 'publicBaseUrl'>, shareToken: string) =>
  `${config.publicBaseUrl}/share/artifacts/${shareToken}`;

export const presentUsage = (usage: ArtifactUsage) => ({
  input_tokens: usage.inputTokens,
  output_tokens: usage.outputTokens,
  credits: usage.credits,
});

export const presentArtifact = (config: Pick<Config, 'publicBaseUrl'>, row: ArtifactRecord): Artifact => ({
  id: row.id,
  name: row.name,
  content: row.content,
  manually_edited: row.manuallyEdited,
  notes: row.notes,
  share_token: row.shareToken,
  chat_history: row.chatHistory,
  url: shareUrl(config, row.shareToken),
  project_id: row.projectId,
  artifact_type_slug: row.artifactTypeSlug,
  skill_id: row.skillId,
  chat_id: row.chatId,
  model_configuration_id: row.modelConfigurationId,
  usage: presentUsage({
    inputTokens: row.inputTokens,
    outputTokens: row.outputTokens,
    credits: Number(row.credits),
  }),
  created_at: formatTimestamp(row.createdAt),
  updated_at: formatTimestamp(row.updatedAt),
  ...(row.parsed === null || row.parsed === undefined ? {} : { parsed: row.parsed }),
});
