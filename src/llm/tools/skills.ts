import { tool } from 'ai';
import { and, asc, eq, inArray, isNull } from 'drizzle-orm';
import { z } from 'zod';
import { agentSkills, artifactTypes, skillArtifactTypes, skills } from '../../db/schema/index.js';
import { notFound } from '../../http/errors.js';
import { checkInputs, fillPlaceholders } from '../../modules/artifacts/prompt.js';
import type { ToolFamily, ToolScope } from './registry.js';

const MAX_SKILLS_LISTED = 100;

// Built once, not per turn: JSON Schema conversion is cached per schema object (lean-client.ts).
const listSkillsInput = z.object({});
const runSkillInput = z.object({
  skill_id: z.number().int().describe('Id from list_skills'),
  inputs: z
    .array(z.object({ name: z.string(), value: z.string() }))
    .describe('Values for every custom variable of the skill; [] when it has none'),
});

/**
 * `list_skills` and `run_skill` for chat turns. Running a skill inside a chat does what its slash
 * command does: the skill's prompt, with the inputs filled in, becomes the instructions the
 * assistant carries out in its reply (to save the result as a document, the artifacts tool runs
 * the skill instead).
 */
export const skillTools: ToolFamily = async (scope) => ({
  tools: {
    list_skills: tool({
      description:
        'List the skills available in this conversation: id, name, description, slash command, the custom variables each needs, and the artifact types it writes.',
      inputSchema: listSkillsInput,
      execute: async () => ({ skills: await listSkills(scope) }),
    }),
    run_skill: tool({
      description:
        'Run a skill: returns its instructions with the inputs filled in. Follow those instructions in your reply.',
      inputSchema: runSkillInput,
      execute: async (args) => {
        const skill = await findAvailableSkill(scope, args.skill_id);
        const values = checkInputs(skill.content, skill.customVariables, args.inputs);
        return {
          skill_id: skill.id,
          name: skill.name,
          instructions: fillPlaceholders(skill.content, values),
        };
      },
    }),
  },
  notes: [],
});

/** The agent's skills when the turn has an agent with skills; otherwise every skill of the organization. */
async function availableSkillIds(scope: ToolScope): Promise<number[] | null> {
  if (scope.agentId === null) return null;
  const rows = await scope.ctx.db
    .select({ id: agentSkills.skillId })
    .from(agentSkills)
    .where(eq(agentSkills.agentId, scope.agentId));
  return rows.length > 0 ? rows.map((r) => r.id) : null;
}

async function skillRows(scope: ToolScope, onlyId?: number) {
  const ids = await availableSkillIds(scope);
  return scope.ctx.db
    .select()
    .from(skills)
    .where(
      and(
        eq(skills.organizationId, scope.ctx.principal.organizationId),
        isNull(skills.deletedAt),
        ids === null ? undefined : inArray(skills.id, ids),
        onlyId === undefined ? undefined : eq(skills.id, onlyId),
      ),
    )
    .orderBy(asc(skills.name))
    .limit(MAX_SKILLS_LISTED);
}

async function findAvailableSkill(scope: ToolScope, skillId: number) {
  const [skill] = await skillRows(scope, skillId);
  if (!skill) throw notFound('Skill');
  return skill;
}

async function listSkills(scope: ToolScope) {
  const rows = await skillRows(scope);
  const types =
    rows.length === 0
      ? []
      : await scope.ctx.db
          .select({ skillId: skillArtifactTypes.skillId, slug: artifactTypes.slug })
          .from(skillArtifactTypes)
          .innerJoin(artifactTypes, eq(artifactTypes.id, skillArtifactTypes.artifactTypeId))
          .where(
            and(
              inArray(
                skillArtifactTypes.skillId,
                rows.map((r) => r.id),
              ),
              isNull(artifactTypes.deletedAt),
            ),
          );
  return rows.map((skill) => ({
    id: skill.id,
    name: skill.name,
    description: skill.description,
    slash_command: `/${skill.slug}`,
    custom_variables: skill.customVariables,
    artifact_type_slugs: types.filter((t) => t.skillId === skill.id).map((t) => t.slug),
  }));
}
