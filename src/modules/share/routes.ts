import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { findSharedArtifact } from './service.js';

const ShareParams = Type.Object({ share_token: Type.String() });

/** `GET /share/artifacts/:share_token`: public (the token is the secret), read-only HTML. */
export const shareRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get(
    '/share/artifacts/:share_token',
    {
      config: { access: 'public' },
      schema: {
        operationId: 'getSharePage',
        tags: ['Share pages'],
        summary: 'Public read-only page of an artifact (HTML)',
        description:
          "The artifact's `url`: its title and Markdown content rendered as a standalone HTML page. Needs no API key: the share token is the secret.",
        security: [],
        params: ShareParams,
        response: {
          200: {
            description: 'The artifact as an HTML page',
            content: { 'text/html': { schema: { type: 'string' } } },
          },
          404: {
            description: 'No shared artifact (unknown token or deleted)',
            content: { 'text/html': { schema: { type: 'string' } } },
          },
        },
      },
    },
    async (request, reply) => {
      // The renderer (marked and sanitize-html, about 3 MB of resident memory) is loaded by the
      // first share page a process serves, not by every process at start (bench/README.md, Session 9).
      const [artifact, { renderNotFoundPage, renderSharePage, SHARE_PAGE_CSP }] = await Promise.all([
        findSharedArtifact(app.deps.database.db, request.params.share_token),
        import('./render.js'),
      ]);
      reply
        .header('content-security-policy', SHARE_PAGE_CSP)
        .header('x-content-type-options', 'nosniff')
        .header('referrer-policy', 'no-referrer')
        .header('cache-control', 'no-store')
        .type('text/html; charset=utf-8');
      if (!artifact) return reply.status(404).send(renderNotFoundPage());
      return reply.send(renderSharePage(artifact));
    },
  );
};
