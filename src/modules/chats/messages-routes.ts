import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { contextOf } from '../../http/context.js';
import { badRequest } from '../../http/errors.js';
import { sendJsonText } from '../../http/json-text.js';
import { PageQuery, pagination } from '../../http/pagination.js';
import { IdParams, ok, V2Error, v2Responses } from '../../http/schemas.js';
import { requestArrival } from '../../telemetry/turn-timing.js';
import type { TurnPlan } from '../../turns/plan.js';
import type { StartedTurn } from '../../turns/runner.js';
import { compileResponseFormat } from '../../turns/structured-output.js';
import { looksLikeSlashCommand } from '../../turns/system-prompt.js';
import { watchPauses } from '../../turns/turn-stops.js';
import { turnStops } from './approvals-routes.js';
import { ATTACHMENT_BODY_LIMIT, prepareAttachments } from './attachments.js';
import { sendWhenBusy } from './busy-http.js';
import { historyPage } from './history-page.js';
import { BusyChatError, MessageCreated, MessageList, SendMessageBody } from './schemas.js';
import { prepareTurn } from './service.js';
import { awaitTurn, reattachRepeat, STREAM_NOTE, streamTurn } from './turn-http.js';
import { requireContent } from './validation.js';

const tags = ['Chats'];

/** Send a message and read history (spec 4.1). */
export async function messageRoutes(parent: FastifyInstance): Promise<void> {
  const app = parent.withTypeProvider<TypeBoxTypeProvider>();
  const { deps } = app;
  const { replyTimeoutMs } = deps.config;
  /** A non-streamed turn's answer: its message once done, or paused for tool approvals; 504 after the reply timeout. */
  const answer = async (reply: FastifyReply, plan: TurnPlan, turn: StartedTurn) => {
    const pauses = watchPauses(turnStops(deps), plan, turn);
    const message = await awaitTurn(reply, turn, replyTimeoutMs, {}, pauses);
    return { status: 'ok' as const, response: { message } };
  };

  app.post(
    '/chats/:id/messages',
    {
      // Images come inline (up to ten of 5 MB each, in base64).
      bodyLimit: ATTACHMENT_BODY_LIMIT,
      schema: {
        operationId: 'sendMessage',
        tags,
        summary: 'Send a message; one turn at a time per chat (409, queue or interrupt: `if_busy`)',
        description: `${STREAM_NOTE} A message starting with a skill's slash command runs that skill.`,
        params: IdParams,
        body: SendMessageBody,
        response: { ...v2Responses({ 200: ok(MessageCreated) }), 409: BusyChatError, 503: V2Error },
      },
    },
    async (request, reply) => {
      const arrivedAt = requestArrival(reply);
      const { content, stream, if_busy: ifBusy = 'reject' } = request.body;
      requireContent(content);
      const structured = compileResponseFormat(request.body.response_format);
      const ctx = contextOf(request);
      if (await reattachRepeat(request, reply, deps)) return reply;
      const additions = { structured };
      // A plain message (the common case): plan, start, history and tool servers in one statement.
      if (ifBusy === 'reject' && request.body.attachments === undefined && !looksLikeSlashCommand(content)) {
        const { plan, start } = await deps.turns.open(ctx, request.params.id, content, {
          arrivedAt,
          additions,
        });
        if (stream) {
          await streamTurn(request, reply, deps, start, {});
          return reply;
        }
        return answer(reply, plan, await start());
      }
      const plan = await prepareTurn(ctx, request.params.id);
      if (ifBusy !== 'reject') {
        // The chat queue stores a message's text only (docs/decisions.md, issue 18).
        if (request.body.attachments !== undefined || structured !== undefined)
          throw badRequest('attachments and response_format need if_busy "reject" (they are not queued)', {
            if_busy: ['must be "reject" with attachments or response_format'],
          });
        const send = { ctx, plan, content, stream: stream === true, policy: ifBusy, arrivedAt };
        const message = await sendWhenBusy(request, reply, deps, send);
        return message ? { status: 'ok' as const, response: { message } } : reply;
      }
      const attachments = await prepareAttachments(ctx, plan.project.id, request.body.attachments);
      const withAttachments = { ...additions, attachments };
      if (stream) {
        await streamTurn(
          request,
          reply,
          deps,
          () => deps.turns.begin(ctx, plan, content, { arrivedAt, additions: withAttachments }),
          {},
        );
        return reply;
      }
      return answer(
        reply,
        plan,
        await deps.turns.begin(ctx, plan, content, { arrivedAt, additions: withAttachments }),
      );
    },
  );

  app.get(
    '/chats/:id/messages',
    {
      schema: {
        operationId: 'listMessages',
        description: "The chat's messages with their tool executions, oldest first. Paginated.",
        tags,
        summary: 'Read history, oldest first',
        params: IdParams,
        querystring: PageQuery,
        response: v2Responses({ 200: ok(MessageList) }),
      },
    },
    async (request, reply) => {
      const { messagesJson, total } = await historyPage(contextOf(request), request.params.id, request.query);
      // PostgreSQL wrote the messages' JSON (history-page.ts): sent as text, past the serializer.
      const page = JSON.stringify(pagination(request.query, total));
      return sendJsonText(
        reply,
        `{"status":"ok","response":{"messages":${messagesJson},"pagination":${page}}}`,
      );
    },
  );
}
