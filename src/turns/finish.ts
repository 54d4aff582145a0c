import { eq, getTableColumns, sql } from 'drizzle-orm';
import { type Database, type Queryable, rowOf } from '../db/client.js';
import { chatMessages, type MessageRow } from '../db/schema/index.js';
import { chargeUsage, costOf, type Usage } from '../modules/credits/service.js';
import type { MessageAnnotations } from './additions.js';
import type { TurnFailure } from './failure.js';
import { releaseTurnLease } from './lease.js';
import { replaceReply } from './versions.js';
import { recordTurnCompleted, recordTurnFailed, turnCompletedEvent } from './webhook-events.js';

/**
 * How a turn ended. `completed` and `cancelled` (by a cancel request) keep the reply in history,
 * as far as it got, charged for what the model reported. `failed` (an error, or the server
 * stopping: `failure.cancelled`) marks both messages `failed`: shown in history as such, never
 * given to the model again; the reply keeps what was generated.
 */
export type TurnEnd =
  | { kind: 'completed' }
  | { kind: 'cancelled' }
  | { kind: 'failed'; failure: TurnFailure };

export interface TurnOutcomeRecord {
  turnId: number;
  chatId: number;
  projectId: number;
  userMessageId: number;
  assistantMessageId: number;
  /** The reply as far as it got. */
  text: string;
  /** Issue 18 fields of the reply (parsed, citations), when it completed. */
  annotations?: MessageAnnotations;
  usage: Usage;
  /** The ledger row's fields besides the usage. */
  charge: Omit<Parameters<typeof chargeUsage>[1], 'usage'>;
  end: TurnEnd;
}

/**
 * Writes a turn's result, inside the caller's transaction: the released lease (the chat takes
 * messages again), the assistant message and the charge. Returns the assistant message's row, or
 * null when the turn was no longer running: another process retired its expired lease, or a
 * cancel took over a turn whose process did not answer; their record stands.
 */
export async function finishTurn(tx: Queryable, outcome: TurnOutcomeRecord): Promise<MessageRow | null> {
  const { end, usage } = outcome;
  const failed = end.kind === 'failed';
  const status = end.kind === 'completed' ? 'completed' : end.kind === 'cancelled' ? 'cancelled' : 'failed';
  // The turn records who stopped it (a shutdown cancels it); its messages simply failed.
  const turnStatus = failed && end.failure.cancelled ? 'cancelled' : status;
  if (!(await releaseTurnLease(tx, outcome.turnId, turnStatus))) return null;
  // A failed turn is charged only when the model reported usage; a finished one always gets its ledger row.
  const spent = usage.inputTokens > 0 || usage.outputTokens > 0;
  const credits = !failed || spent ? await chargeUsage(tx, { ...outcome.charge, usage }) : 0;
  const [row] = await tx
    .update(chatMessages)
    .set({
      content: outcome.text,
      ...(end.kind === 'completed' ? outcome.annotations : {}),
      status,
      error: failed ? end.failure.message : null,
      inputTokens: usage.inputTokens,
      outputTokens: usage.outputTokens,
      credits,
      // A reply in history is created when it is complete; history order stays by id.
      ...(failed ? {} : { createdAt: sql`now()` }),
      completedAt: sql`now()`,
    })
    .where(eq(chatMessages.id, outcome.assistantMessageId))
    .returning();
  // A regeneration that failed leaves the user message answered by the reply it was to replace.
  if (failed && row?.regeneratesId == null)
    await tx
      .update(chatMessages)
      .set({ status, error: end.failure.message })
      .where(eq(chatMessages.id, outcome.userMessageId));
  if (!failed && row?.regeneratesId != null) await replaceReply(tx, row.regeneratesId, row.id);
  const turn = {
    organizationId: outcome.charge.organizationId,
    projectId: outcome.projectId,
    chatId: outcome.chatId,
    messageId: outcome.assistantMessageId,
  };
  if (failed) await recordTurnFailed(tx, turn, { code: end.failure.code, message: end.failure.message });
  else await recordTurnCompleted(tx, turn, { ...usage, credits });
  return row;
}

/**
 * Writes a turn's result. A reply kept in history (completed, or stopped by a cancel request) that
 * replaces no other takes one statement (finishTurnAtOnce); a failed turn or a regeneration,
 * rarer and with more to write, takes finishTurn in a transaction.
 */
export function writeTurnEnd(
  database: Database,
  outcome: TurnOutcomeRecord,
  options: { regeneration: boolean },
): Promise<MessageRow | null> {
  if (outcome.end.kind === 'failed' || options.regeneration)
    return database.db.transaction((tx) => finishTurn(tx, outcome));
  return finishTurnAtOnce(database, outcome);
}

/**
 * finishTurn of a reply kept in history that replaces none, as one statement (issue 14: one round
 * trip and no query building where the transaction took seven): the released lease, the charge
 * (ledger row, and the balance when it costs something), the message and the
 * `chat_turn_completed` event when a webhook would receive it, all only when the turn was still
 * running. A statement is atomic by itself, so it is all or nothing as the transaction was.
 */
export async function finishTurnAtOnce(
  database: Database,
  outcome: TurnOutcomeRecord,
): Promise<MessageRow | null> {
  const { end, usage, charge } = outcome;
  if (end.kind === 'failed') throw new Error('finishTurnAtOnce writes replies kept in history only');
  const credits = costOf(usage, charge.prices);
  const annotations = end.kind === 'completed' ? (outcome.annotations ?? {}) : {};
  const event = turnCompletedEvent(
    {
      organizationId: charge.organizationId,
      projectId: outcome.projectId,
      chatId: outcome.chatId,
      messageId: outcome.assistantMessageId,
    },
    { ...usage, credits },
  );
  const { rows } = await database.pipelinedQuery<Record<string, unknown>>('turn_finish', FINISH_TURN_SQL, [
    outcome.turnId,
    end.kind,
    charge.organizationId,
    -credits,
    charge.projectId,
    charge.apiKeyId,
    charge.modelConfigurationId,
    usage.inputTokens,
    usage.outputTokens,
    charge.reference,
    credits,
    outcome.text,
    annotations.parsed !== undefined,
    annotations.parsed == null ? null : JSON.stringify(annotations.parsed),
    annotations.citations !== undefined,
    JSON.stringify(annotations.citations ?? []),
    outcome.assistantMessageId,
    outcome.projectId,
    event.eventName,
    JSON.stringify(event.eventData),
  ]);
  return rows[0] ? rowOf(chatMessages, rows[0]) : null;
}

/** chat_messages' columns, listed: the statement is prepared (Database.prepared). */
const MESSAGE_COLUMNS = Object.values(getTableColumns(chatMessages))
  .map((c) => `"${c.name}"`)
  .join(', ');

const FINISH_TURN_SQL = `
with released as (
  update chat_turns set status = $2::text, finished_at = now()
  where id = $1::int and status = 'running'
  returning id
), ledger as (
  insert into credit_ledger
    (organization_id, kind, amount, project_id, api_key_id, model_configuration_id, input_tokens, output_tokens, reference)
  select $3::int, 'usage', $4::numeric, $5::int, $6::int, $7::int, $8::int, $9::int, $10::text from released
), balance as (
  update organizations set credit_balance = credit_balance - $11::numeric
  where id = $3::int and $11::numeric <> 0 and exists (select 1 from released)
), message as (
  update chat_messages set
    content = $12::text,
    parsed = case when $13::boolean then $14::jsonb else parsed end,
    citations = case when $15::boolean then $16::jsonb else citations end,
    status = $2::text, error = null, input_tokens = $8::int, output_tokens = $9::int,
    credits = $11::numeric, created_at = now(), completed_at = now()
  where id = $17::int and exists (select 1 from released)
  returning ${MESSAGE_COLUMNS}
), event as (
  insert into webhook_events (organization_id, project_id, event_name, event_data)
  select $3::int, $18::int, $19::text, $20::jsonb from released
  where exists (
    select 1 from project_webhooks
    where organization_id = $3::int and (project_id is null or project_id = $18::int)
      and events @> jsonb_build_array($19::text)
  )
)
select * from message`;
