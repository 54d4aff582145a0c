/**
 * Tool input schemas are built once, not per turn: the lean client converts a schema to JSON
 * Schema once per schema object (llm/lean-client.ts, wireTools), so a family that built its
 * schemas per call would put zod's conversion back on every turn.
 */
import { describe, expect, it } from 'vitest';
import { artifactTools } from '../src/llm/tools/artifacts.js';
import { knowledgeTools } from '../src/llm/tools/knowledge.js';
import type { ToolFamily, ToolScope } from '../src/llm/tools/registry.js';
import { skillTools } from '../src/llm/tools/skills.js';

const scope = { ctx: {}, projectId: 1, chatId: 1, agentId: null } as unknown as ToolScope;

describe('tool input schemas', () => {
  it.each([
    ['knowledge', knowledgeTools],
    ['skills', skillTools],
  ] as [string, ToolFamily][])('%s: the same schema objects on every turn', async (_name, family) => {
    const first = (await family(scope, {})).tools;
    const second = (await family({ ...scope, chatId: 2 }, {})).tools;
    expect(Object.keys(first).length).toBeGreaterThan(0);
    for (const [name, tool] of Object.entries(first))
      expect(second[name]!.inputSchema).toBe(tool.inputSchema);
  });

  it('artifacts: the same schema objects on every turn', async () => {
    // The family reads the catalog of artifact types first; an empty one is enough here.
    const db = { select: () => chain };
    const chain: any = new Proxy(() => {}, {
      get: (_t, key) => (key === 'then' ? (resolve: (rows: unknown[]) => void) => resolve([]) : () => chain),
    });
    const withDb = { ...scope, ctx: { db, principal: { organizationId: 1 } } } as unknown as ToolScope;
    const first = (await artifactTools(withDb, {})).tools;
    const second = (await artifactTools(withDb, {})).tools;
    for (const [name, tool] of Object.entries(first))
      expect(second[name]!.inputSchema).toBe(tool.inputSchema);
  });
});
