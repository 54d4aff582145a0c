import { tool } from 'ai';
import { and, asc, eq, inArray, isNull } from 'drizzle-orm';
import { z } from 'zod';
import { artifactTypes, skillArtifactTypes, skills } from '../../db/schema/index.js';
import { generateArtifact, refineArtifact } from '../../modules/artifacts/generation.js';
import type { ArtifactRecord } from '../../modules/artifacts/lookup.js';
import { shareUrl } from '../../modules/artifacts/presenter.js';
import type { ToolFamily, ToolScope } from './registry.js';

/** Enough for the assistant to talk about the result; the whole document is behind its url. */
const MAX_CONTENT_IN_RESULT = 6000;
const MAX_TYPES_DESCRIBED = 30;

const inputsSchema = z
  .array(z.object({ name: z.string().describe('Variable name'), value: z.string() }))
  .describe('Values for every custom variable of the skill; [] when it has none');

// Built once, not per turn: JSON Schema conversion is cached per schema object (lean-client.ts).
const createArtifactInput = z.object({
  artifact_type_slug: z.string().describe('Slug of the artifact type'),
  skill_id: z.number().int().describe('A skill of that artifact type'),
  inputs: inputsSchema,
  name: z.string().optional().describe('Name of the artifact; otherwise taken from its title'),
});
const refineArtifactInput = z.object({
  artifact_id: z.number().int().describe('Id of the artifact to revise'),
  refine_prompt: z.string().min(1).describe('What to change'),
});

/**
 * `create_artifact` and `refine_artifact` for chat turns (spec 1): the assistant writes documents
 * mid-conversation with the same generation code as the API; the artifact records the turn's chat.
 */
export const artifactTools: ToolFamily = async (scope, families) => {
  const catalog = await describeCatalog(scope);
  return {
    tools: {
      create_artifact: tool({
        description: [
          'Create an artifact: a document of a given artifact type, written by running a skill with its inputs.',
          'Returns the artifact id, name, share url and content. Artifact types and their skills:',
          catalog,
        ].join('\n'),
        inputSchema: createArtifactInput,
        execute: async (args, { abortSignal }) => {
          const result = await generateArtifact(
            scope.ctx,
            {
              artifactTypeSlug: args.artifact_type_slug,
              projectId: scope.projectId,
              skillId: args.skill_id,
              inputs: args.inputs,
              name: args.name ?? null,
              chatId: scope.chatId,
            },
            { families, signal: abortSignal ?? scope.signal },
          );
          return toolResult(scope, result.artifact);
        },
      }),
      refine_artifact: tool({
        description:
          'Revise an existing artifact by instruction; the whole document is rewritten. Returns the new version.',
        inputSchema: refineArtifactInput,
        execute: async (args, { abortSignal }) => {
          const result = await refineArtifact(
            scope.ctx,
            { artifactTypeSlug: null, artifactId: args.artifact_id, refinePrompt: args.refine_prompt },
            { families, signal: abortSignal ?? scope.signal },
          );
          return toolResult(scope, result.artifact);
        },
      }),
    },
    notes: [],
  };
};

function toolResult(scope: ToolScope, artifact: ArtifactRecord) {
  const truncated = artifact.content.length > MAX_CONTENT_IN_RESULT;
  return {
    artifact_id: artifact.id,
    name: artifact.name,
    artifact_type_slug: artifact.artifactTypeSlug,
    url: shareUrl(scope.ctx.config, artifact.shareToken),
    content: truncated ? `${artifact.content.slice(0, MAX_CONTENT_IN_RESULT)}…` : artifact.content,
    content_truncated: truncated,
  };
}

/** A compact list of the organization's artifact types with their skills and variables, for the model. */
async function describeCatalog({ ctx }: ToolScope): Promise<string> {
  const types = await ctx.db
    .select({ id: artifactTypes.id, slug: artifactTypes.slug, name: artifactTypes.name })
    .from(artifactTypes)
    .where(
      and(eq(artifactTypes.organizationId, ctx.principal.organizationId), isNull(artifactTypes.deletedAt)),
    )
    .orderBy(asc(artifactTypes.name))
    .limit(MAX_TYPES_DESCRIBED);
  if (types.length === 0) return '(none: this organization has no artifact types yet)';
  const links = await ctx.db
    .select({
      typeId: skillArtifactTypes.artifactTypeId,
      id: skills.id,
      name: skills.name,
      variables: skills.customVariables,
    })
    .from(skillArtifactTypes)
    .innerJoin(skills, eq(skills.id, skillArtifactTypes.skillId))
    .where(
      and(
        inArray(
          skillArtifactTypes.artifactTypeId,
          types.map((t) => t.id),
        ),
        isNull(skills.deletedAt),
      ),
    )
    .orderBy(asc(skills.name));
  return types
    .map((type) => {
      const ofType = links.filter((l) => l.typeId === type.id);
      const skillList = ofType.length
        ? ofType
            .map((s) => {
              const vars = s.variables.map((v) => v.name).join(', ');
              return `skill ${s.id} "${s.name}"${vars ? ` (inputs: ${vars})` : ' (no inputs)'}`;
            })
            .join('; ')
        : 'no skills';
      return `- ${type.slug} ("${type.name}"): ${skillList}`;
    })
    .join('\n');
}
