import { tool } from 'ai';
import { z } from 'zod';
import { DEFAULT_PASSAGES, searchKnowledge } from '../../knowledge/project-search.js';
import { KNOWLEDGE_SEARCH_TOOL, MAX_SEARCH_QUERY_CHARS } from '../builtin-model.js';
import type { ToolFamily } from './registry.js';

/**
 * Built once, not per turn: the lean client converts a tool's schema to JSON Schema once per schema
 * object (llm/lean-client.ts, wireTools), so a schema built per turn cost zod work on every turn.
 */
const knowledgeSearchInput = z.object({
  query: z
    .string()
    .min(1)
    .max(MAX_SEARCH_QUERY_CHARS)
    .describe('What to look for, in natural language or keywords'),
});

/**
 * `knowledge_search`: the passages of the project's documents that best match a query, with the
 * document id, name, position and score of each so the answer can cite its sources.
 */
export const knowledgeTools: ToolFamily = async (scope) => ({
  tools: {
    [KNOWLEDGE_SEARCH_TOOL]: tool({
      description:
        "Search the project's knowledge base (uploaded documents). Returns the most relevant passages with document_id, document_name, position, score, text and heading_path. Cite the document names you use.",
      inputSchema: knowledgeSearchInput,
      execute: async ({ query }) => ({
        passages: await searchKnowledge(scope.ctx, {
          projectId: scope.projectId,
          query,
          limit: DEFAULT_PASSAGES,
          signal: scope.signal,
        }),
      }),
    }),
  },
  notes: [],
});
