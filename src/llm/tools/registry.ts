import type { Tool } from 'ai';
import type { ServiceContext } from '../../core/context.js';
import type { AgentTool } from '../../db/schema/index.js';

/** Where tools run: the chat turn or artifact generation they serve. */
export interface ToolScope {
  ctx: ServiceContext;
  projectId: number;
  /** The chat of the turn; null during artifact generation outside a chat. */
  chatId: number | null;
  agentId: number | null;
  signal?: AbortSignal;
}

export interface ToolSet {
  /** AI SDK tools keyed by the name the model sees; names must be unique across families. */
  tools: Record<string, Tool>;
  /** Things the turn should know, e.g. "the tool server X is unavailable"; added to the system prompt. */
  notes: string[];
}

/**
 * One family of tools (spec 1: knowledge, artifacts, skills, connected integrations). `families`
 * are those the caller draws from, for tools that run work needing tools themselves (artifacts).
 */
export type ToolFamily = (scope: ToolScope, families: ToolFamilies) => Promise<ToolSet>;

export type ToolFamilies = Partial<Record<AgentTool, ToolFamily>>;

/** Builds the tools of the enabled families; a family that fails to load is reported, not fatal. */
export async function collectTools(
  families: ToolFamilies,
  enabled: AgentTool[],
  scope: ToolScope,
): Promise<ToolSet> {
  const result: ToolSet = { tools: {}, notes: [] };
  for (const name of enabled) {
    const family = families[name];
    if (!family) continue;
    try {
      const set = await family(scope, families);
      Object.assign(result.tools, set.tools);
      result.notes.push(...set.notes);
    } catch (err) {
      scope.ctx.log.warn({ err, family: name }, 'tool family unavailable for this turn');
      result.notes.push(`The ${name} tools are unavailable right now.`);
    }
  }
  return result;
}
