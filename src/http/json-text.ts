import type { FastifyReply } from 'fastify';

/**
 * Sends JSON the route already has as text (e.g. written by PostgreSQL), as is: Fastify skips its
 * serializer for a string with a JSON content type. The route's response schema still documents
 * the shape; the route's tests hold the text to it.
 */
export function sendJsonText(reply: FastifyReply, json: string): FastifyReply {
  return reply.type('application/json; charset=utf-8').send(json);
}
