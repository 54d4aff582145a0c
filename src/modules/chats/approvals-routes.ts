import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { AppDeps } from '../../core/deps.js';
import { contextOf } from '../../http/context.js';
import { ApiError } from '../../http/errors.js';
import { setIdempotentStream } from '../../http/idempotency.js';
import { Id, ok, v2Responses } from '../../http/schemas.js';
import { SseStream } from '../../http/sse.js';
import { APPROVAL_CHANNEL } from '../../turns/approvals.js';
import { turnStreamKey } from '../../turns/events.js';
import { type TurnStopDeps, watchTurnStops } from '../../turns/turn-stops.js';
import { decideApproval } from './approvals.js';
import { MessageCreated } from './schemas.js';
import { findChat } from './service.js';
import { reattachRepeat, relayTurn, replyTimeoutMessage, STREAM_NOTE } from './turn-http.js';

const tags = ['Chats'];

const ApprovalParams = Type.Object({
  id: Id(),
  tool_call_id: Type.String({ minLength: 1, maxLength: 500, description: 'From `approval_required`' }),
});

export const DecideApprovalBody = Type.Object(
  {
    approved: Type.Boolean({ description: 'true: the tool runs; false: it does not, and the model is told' }),
    reason: Type.Optional(
      Type.String({
        maxLength: 2000,
        description: "Kept with the decision; on a denial, part of the tool's result the model reads",
      }),
    ),
    stream: Type.Optional(
      Type.Boolean({ default: false, description: 'Stream the rest of the turn (text/event-stream)' }),
    ),
  },
  { title: 'DecideApprovalBody' },
);
export type DecideApprovalBody = Static<typeof DecideApprovalBody>;

/** What following a turn to its next stop needs, from the app's resources. */
export const turnStops = (deps: Pick<AppDeps, 'database' | 'streams' | 'turns'>): TurnStopDeps => ({
  db: deps.database.db,
  streams: deps.streams,
  isDead: (turnId) => deps.turns.isDead(turnId),
});

/** Deciding a tool call that waits for approval (issue 17; agents' `tools_requiring_approval`). */
export async function approvalRoutes(parent: FastifyInstance): Promise<void> {
  const app = parent.withTypeProvider<TypeBoxTypeProvider>();
  const { deps } = app;
  const { replyTimeoutMs } = deps.config;

  app.post(
    '/chats/:id/approvals/:tool_call_id',
    {
      schema: {
        operationId: 'decideToolApproval',
        tags,
        summary: 'Approve or deny a tool call waiting for approval',
        description: `Decides a tool call announced by \`approval_required\` (the chat's agent lists the tool in \`tools_requiring_approval\`), from any server process; only the key that owns the chat may (other keys get 404, as for every chat endpoint). Approved, the tool runs and \`tool_result\` follows; denied, it does not run: its tool execution gets \`status: "denied"\` and \`error: {message}\` with the reason, which the model receives as the tool's result, and the turn continues. The decision is recorded with the deciding key (and in the audit log). The answer is a send-message's: \`response.message\` once the turn finishes, or pauses again for another approval (\`status: "requires_action"\`), within REPLY_TIMEOUT_MS (else 504); with \`stream: true\`, the rest of the turn's events. ${STREAM_NOTE} 404 when the chat never asked about this tool call; 409 when it is not pending (decided, expired, or its turn is no longer running).`,
        params: ApprovalParams,
        body: DecideApprovalBody,
        response: v2Responses({ 200: ok(MessageCreated) }),
      },
    },
    async (request, reply) => {
      const ctx = contextOf(request);
      const chat = await findChat(ctx, request.params.id);
      if (await reattachRepeat(request, reply, deps)) return reply;
      const { approved, reason, stream } = request.body;
      const decided = await decideApproval(ctx, chat.id, request.params.tool_call_id, { approved, reason });
      // Wake the waiting call: here at once, elsewhere by notification (it polls, too).
      deps.turns.approvals.wake(decided.approvalId);
      await deps.streams.notifier
        .notify(APPROVAL_CHANNEL, String(decided.approvalId))
        .catch((err) => request.log.warn({ err }, 'could not notify the decision; the waiting turn polls'));
      if (stream) {
        const state = await deps.streams.describe(turnStreamKey(decided.turnId));
        await setIdempotentStream(request, turnStreamKey(decided.turnId)).catch((err) =>
          request.log.error({ err }, 'could not record the stream of an idempotent request'),
        );
        await relayTurn(new SseStream(reply), deps, decided.turnId, state?.lastSeq ?? 0, {});
        return reply;
      }
      const watch = watchTurnStops(turnStops(deps), decided);
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), replyTimeoutMs);
      });
      const stop = await Promise.race([watch.next, timeout]).finally(() => {
        clearTimeout(timer);
        watch.stop();
      });
      if (stop === 'timeout') throw new ApiError(504, 'reply_timeout', replyTimeoutMessage(replyTimeoutMs));
      if (stop.kind === 'failed') throw stop.error;
      return { status: 'ok' as const, response: { message: stop.message } };
    },
  );
}
