import type { ServiceContext } from '../core/context.js';
import { documentVisibleToProject } from '../policies/documents.js';
import { type Passage, searchPassages } from './search.js';

export type { Passage } from './search.js';

export interface KnowledgeQuery {
  projectId: number;
  query: string;
  /** Passages to return (1-50, default 5). */
  limit?: number;
  signal?: AbortSignal;
}

export const DEFAULT_PASSAGES = 5;

/**
 * The passages of the knowledge base that best answer `query`, among the documents the project
 * and the caller's key may read (src/knowledge/access.ts). Used by the chat's knowledge tool and by
 * artifact generation for context. The caller has already checked that the key may use the project.
 */
export function searchKnowledge(ctx: ServiceContext, request: KnowledgeQuery): Promise<Passage[]> {
  return searchPassages(
    {
      database: ctx.database,
      secrets: ctx.secrets,
      vectors: ctx.vectors,
      outbound: ctx.config,
      log: ctx.log,
    },
    {
      organizationId: ctx.principal.organizationId,
      visible: documentVisibleToProject(ctx.principal, request.projectId),
      query: request.query,
      limit: request.limit ?? DEFAULT_PASSAGES,
      signal: request.signal,
    },
  );
}
