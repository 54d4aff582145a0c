import { and, eq, isNull } from 'drizzle-orm';
import type { Queryable } from '../db/client.js';
import { type AgentRow, agentSkills, type ProjectRow, type SkillRow, skills } from '../db/schema/index.js';

export interface SystemPromptParts {
  project: Pick<ProjectRow, 'name' | 'overview'>;
  agent: Pick<AgentRow, 'name' | 'instructions'> | null;
  /** The agent's skills, offered to the user as slash commands. */
  skills: Pick<SkillRow, 'name' | 'slug' | 'description'>[];
  /** From the tool families (e.g. a tool server that is down). */
  toolNotes: string[];
}

/** The agent's instructions first (they shape every turn), then the project's context and tool notes. */
export function buildSystemPrompt(parts: SystemPromptParts): string {
  const sections: string[] = [];
  const instructions = parts.agent?.instructions.trim();
  if (instructions) sections.push(instructions);
  else sections.push('You are a helpful assistant. Answer clearly and accurately.');

  const overview = parts.project.overview.trim();
  sections.push(
    [
      `You are working in the project "${parts.project.name}".`,
      overview ? `Project overview:\n${overview}` : '',
    ]
      .filter(Boolean)
      .join('\n'),
  );

  if (parts.skills.length > 0) {
    sections.push(
      [
        'The user can run these skills by starting a message with their slash command:',
        ...parts.skills.map((s) => `- /${s.slug}: ${s.name}${s.description ? ` — ${s.description}` : ''}`),
      ].join('\n'),
    );
  }
  if (parts.toolNotes.length > 0)
    sections.push(['Notes about your tools:', ...parts.toolNotes.map((n) => `- ${n}`)].join('\n'));
  return sections.join('\n\n');
}

export async function skillsOfAgent(db: Queryable, agentId: number): Promise<SkillRow[]> {
  const rows = await db
    .select({ skill: skills })
    .from(agentSkills)
    .innerJoin(skills, eq(skills.id, agentSkills.skillId))
    .where(and(eq(agentSkills.agentId, agentId), isNull(skills.deletedAt)))
    .orderBy(skills.name);
  return rows.map((r) => r.skill);
}

const SLASH_COMMAND = /^\/([a-z0-9]+(?:-[a-z0-9]+)*)(?=\s|$)/;

/** Whether a message starts like a slash command (expandSlashCommand then looks the skill up). */
export const looksLikeSlashCommand = (content: string) => SLASH_COMMAND.test(content.trimStart());

/**
 * A message starting with a skill's slash command (`/` + slug, DESIGN.md 4) runs that skill: the
 * model receives the skill's prompt followed by the rest of the message. Null when the message
 * names no skill of the organization (it is then sent as written).
 */
export async function expandSlashCommand(
  db: Queryable,
  organizationId: number,
  content: string,
): Promise<{ skill: SkillRow; prompt: string } | null> {
  const trimmed = content.trimStart();
  const match = SLASH_COMMAND.exec(trimmed);
  if (!match) return null;
  const [skill] = await db
    .select()
    .from(skills)
    .where(
      and(eq(skills.organizationId, organizationId), eq(skills.slug, match[1]), isNull(skills.deletedAt)),
    );
  if (!skill) return null;
  const rest = trimmed.slice(match[0].length).trim();
  const prompt = rest ? `${skill.content.trim()}\n\n${rest}` : skill.content.trim();
  return { skill, prompt };
}
