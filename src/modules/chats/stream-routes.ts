import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { contextOf } from '../../http/context.js';
import { badRequest } from '../../http/errors.js';
import { IdParams, ok, v2Responses } from '../../http/schemas.js';
import { SseStream } from '../../http/sse.js';
import { ChatStreamEvents, eventList } from '../../streams/protocol.js';
import { awaitCancelledTurn, CANCEL_ANSWER_MS, requestTurnCancel } from '../../turns/cancel.js';
import { turnStreamKey } from '../../turns/events.js';
import { attachableTurn, REATTACH_WINDOW_MINUTES } from '../../turns/reattach.js';
import { MessageCreated } from './schemas.js';
import { findChat } from './service.js';
import { relayTurn } from './turn-http.js';

const tags = ['Chats'];

const StreamQuery = Type.Object({
  after: Type.Optional(
    Type.Integer({
      minimum: 0,
      description: 'Resume after this event id (as the Last-Event-ID header does)',
    }),
  ),
});

const eventStream = {
  description: `text/event-stream: the turn's events (${eventList(ChatStreamEvents)}), each with its \`id:\``,
  content: { 'text/event-stream': { schema: { type: 'string' } } },
};

/** Where to resume: the Last-Event-ID header (what EventSource sends on reconnection), else `?after=`. */
function resumePoint(request: FastifyRequest, after: number | undefined): number {
  const header = request.headers['last-event-id'];
  if (header === undefined) return after ?? 0;
  const value = Array.isArray(header) ? header[0] : header;
  if (!/^\d{1,9}$/.test(value.trim())) {
    throw badRequest('Last-Event-ID must be the id of an event of this stream (a non-negative integer)', {
      'Last-Event-ID': ['must be a non-negative integer'],
    });
  }
  return Number(value.trim());
}

/** Reattaching to a chat's stream and cancelling its turn (additions to spec 4.1). */
export async function streamRoutes(parent: FastifyInstance): Promise<void> {
  const app = parent.withTypeProvider<TypeBoxTypeProvider>();
  const { streams, turns } = app.deps;

  app.get(
    '/chats/:id/stream',
    {
      schema: {
        operationId: 'streamChat',
        tags,
        summary: "Reattach to the chat's turn stream",
        description: `Streams the chat's turn in progress, or its last one for ${REATTACH_WINDOW_MINUTES} minutes after it ended: from its first event, or after the \`Last-Event-ID\` header or \`?after=\`, then live until \`done\` or \`error\`. Works from any server process, also for a turn waiting for tool approvals (its stream stays open until the decision). A turn whose server stopped before its end (its lease ran out, or it is known dead) ends with an \`error\` event (code 500, the turn was interrupted) after its stored events; one that had written its reply but not yet stored its \`done\` ends with \`done\` carrying that reply. 204 when there is nothing to attach to (no turn, or every event already received).`,
        params: IdParams,
        querystring: StreamQuery,
        response: {
          ...v2Responses({ 204: Type.Null({ description: 'Nothing to attach to' }) }),
          200: eventStream,
        },
      },
    },
    async (request, reply) => {
      const ctx = contextOf(request);
      const chat = await findChat(ctx, request.params.id);
      const after = resumePoint(request, request.query.after);
      const turn = await attachableTurn(ctx.db, chat.id);
      const state = turn ? await streams.describe(turnStreamKey(turn.id)) : null;
      // Nothing to attach to: no turn, every event already received, or a finished turn whose
      // events are gone. A turn that died is attached to: its stored events, then `error`.
      const nothingLeft =
        !turn ||
        (state?.ended === true && state.lastSeq <= after) ||
        (!turn.running && !state && !(await turns.isDead(turn.id)));
      if (!turn || nothingLeft) {
        reply.status(204).send(null);
        return reply;
      }
      await relayTurn(new SseStream(reply), app.deps, turn.id, after, {});
      return reply;
    },
  );

  app.post(
    '/chats/:id/cancel',
    {
      schema: {
        operationId: 'cancelChatTurn',
        tags,
        summary: "Stop the chat's turn in progress",
        description:
          "Stops the turn whether streaming, blocking or detached, from any server process. The reply generated so far is kept in history with `cancelled: true` (and its `usage`), the turn's stream ends with `done` carrying it, and the chat takes messages again. A turn whose server does not answer within 3 s (it died) is recorded as cancelled by this request, with the reply as far as it was streamed. 409 when no turn is running.",
        params: IdParams,
        response: v2Responses({ 200: ok(MessageCreated) }),
      },
    },
    async (request) => {
      const ctx = contextOf(request);
      const chat = await findChat(ctx, request.params.id);
      const turnId = await requestTurnCancel(ctx, chat.id);
      const here = await turns.cancelAnywhere(turnId);
      const message = await awaitCancelledTurn(ctx.db, streams, turnId, {
        timeoutMs: turns.settings.leaseMs + 5_000,
        // A turn running elsewhere whose process does not answer (it died) is recorded by the cancel.
        answerMs: here ? null : CANCEL_ANSWER_MS,
        isDead: () => turns.isDead(turnId),
      });
      return { status: 'ok' as const, response: { message } };
    },
  );
}
