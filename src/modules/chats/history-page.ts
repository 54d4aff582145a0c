import type { ServiceContext } from '../../core/context.js';
import { notFound } from '../../http/errors.js';
import { offsetOf, type PageQuery } from '../../http/pagination.js';
import { batchedRow, batchInputs, forEachInput } from './prepared.js';

/*
 * History (GET /api/v2/chats/:id/messages) in one statement, with PostgreSQL writing the page's
 * JSON (issue 14: it was five statements built by Drizzle, then row objects, presenters and
 * Fastify's serializer, about 2 CPU-ms per request). The text is what `presentMessage`
 * (presenter.ts) and the MessageView schema give, key for key and in the schema's order:
 *
 * - `model` null on user messages; `usage` only on assistant messages; `cancelled: true` only on a
 *   reply a cancel stopped; `parsed` only when set; `status` as `messageStatus` maps it;
 * - `created_at` in UTC with six fractional digits (src/http/timestamps.ts);
 * - tool executions by id, with `error` reduced to `{message}` (as the serializer does);
 * - citations reduced to their five schema fields; attachments by position, `document_id` and
 *   `name` on documents only, never the bytes.
 *
 * Strings are escaped by `to_json`, jsonb values written as PostgreSQL renders them (the same
 * values; only whitespace differs from JSON.stringify). Every nullable piece is coalesced: one
 * NULL in a `||` chain would null the whole message.
 *
 * The message filter is `historyMessage` of service.ts, written out: the conversation (completed
 * messages, and replies a cancel stopped, not replaced by a regenerated one), plus both messages
 * of a failed turn (not a failed regeneration). Keep the two in step (test/chats-history-sql.test.ts
 * compares them).
 */
export const HISTORY_FILTER = `(
  ((m.status = 'completed' or (m.role = 'assistant' and m.status = 'cancelled' and m.error is null))
    and m.replaced_by_id is null)
  or (m.status = 'failed' and m.regenerates_id is null))`;

const TIMESTAMP = `'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'`;

const STATUS = `(case
  when m.status = 'cancelled' then (case when m.error is null then 'cancelled' else 'failed' end)
  when m.status = 'failed' then 'failed'
  else 'completed' end)`;

const TOOL_EXECUTIONS = `coalesce((
  select string_agg(
    '{"id":' || t.id
    || ',"tool_name":' || to_json(t.tool_name)::text
    || ',"tool_call_id":' || to_json(t.tool_call_id)::text
    || ',"status":' || to_json(t.status)::text
    || ',"parameters":' || t.parameters::text
    || ',"result":' || coalesce(t.result::text, 'null')
    || ',"error":' || (case when t.error is null or jsonb_typeof(t.error) = 'null' then 'null'
         else '{"message":' || coalesce(to_json(t.error->>'message')::text, 'null') || '}' end)
    || ',"execution_time_ms":' || t.execution_time_ms
    || '}', ',' order by t.id)
  from tool_executions t where t.message_id = m.id), '')`;

const CITATIONS = `(case when m.citations = '[]'::jsonb then '[]' else coalesce((
  select json_agg(json_build_object(
    'marker', c->'marker', 'document_id', c->'document_id', 'document_name', c->'document_name',
    'chunk_id', c->'chunk_id', 'quote', c->'quote') order by n)::text
  from jsonb_array_elements(m.citations) with ordinality as e(c, n)), '[]') end)`;

const ATTACHMENTS = `coalesce((
  select string_agg(
    '{"id":' || a.id
    || ',"type":' || to_json(a.type)::text
    || (case when a.type = 'document'
         then ',"document_id":' || coalesce(a.document_id::text, 'null') || ',"name":' || to_json(coalesce(a.name, ''))::text
         else '' end)
    || ',"media_type":' || to_json(a.media_type)::text
    || ',"size_bytes":' || a.size_bytes
    || '}', ',' order by a.position)
  from chat_attachments a where a.message_id = m.id), '')`;

const MESSAGE = `'{"id":' || m.id
  || ',"role":' || to_json(m.role)::text
  || ',"content":' || to_json(m.content)::text
  || ',"model":' || (case when m.role = 'user' then 'null' else coalesce(to_json(m.model)::text, 'null') end)
  || ',"created_at":"' || to_char(m.created_at at time zone 'UTC', ${TIMESTAMP}) || '"'
  || ',"tool_executions":[' || ${TOOL_EXECUTIONS} || ']'
  || ',"status":"' || ${STATUS} || '"'
  || (case when m.role = 'assistant'
       then ',"usage":{"input_tokens":' || m.input_tokens || ',"output_tokens":' || m.output_tokens
         || ',"credits":' || to_json(m.credits::float8)::text || '}'
       else '' end)
  || (case when ${STATUS} = 'cancelled' then ',"cancelled":true' else '' end)
  || ',"citations":' || ${CITATIONS}
  || ',"attachments":[' || ${ATTACHMENTS} || ']'
  || (case when m.parsed is null or jsonb_typeof(m.parsed) = 'null' then '' else ',"parsed":' || m.parsed::text end)
  || '}'`;

/**
 * $1 chat, $2 organization, $3 API key, $4 page size, $5 offset. Nothing is read unless the chat
 * is the key's and not archived (`owned` false: 404), as `findChat` checks.
 */
const HISTORY_PAGE = `with owned as (
  select c.id from chats c
  where c.id = $1 and c.organization_id = $2 and c.api_key_id = $3 and c.archived_at is null
), page as (
  select m.* from chat_messages m
  where m.chat_id = (select id from owned) and ${HISTORY_FILTER}
  order by m.id limit $4 offset $5
)
select
  exists (select 1 from owned) as owned,
  (select count(*)::int from chat_messages m where m.chat_id = (select id from owned) and ${HISTORY_FILTER}) as total,
  '[' || coalesce((select string_agg(${MESSAGE}, ',' order by m.id) from page m), '') || ']' as messages`;

const TYPES = ['int', 'int', 'int', 'int', 'int'];

const HISTORY_STATEMENT = {
  name: 'history_page',
  types: TYPES,
  text: HISTORY_PAGE,
  // Concurrent requests' pages in one statement (prepared.ts, `batchedRow`), one row each.
  batch: `select i.n, h.owned, h.total, h.messages
from ${batchInputs(TYPES)}
cross join lateral (${forEachInput(HISTORY_PAGE)}) h`,
};

interface HistoryRow {
  owned: boolean;
  total: number;
  messages: string;
}

/** One page of history, oldest first: the messages as JSON text (an array), and the count of all. */
export async function historyPage(
  ctx: Pick<ServiceContext, 'database' | 'principal'>,
  chatId: number,
  query: PageQuery,
): Promise<{ messagesJson: string; total: number }> {
  const { principal } = ctx;
  const row = await batchedRow<HistoryRow>(ctx.database, HISTORY_STATEMENT, [
    chatId,
    principal.organizationId,
    principal.keyId,
    query.page_size,
    offsetOf(query),
  ]);
  if (!row?.owned) throw notFound('Chat');
  return { messagesJson: row.messages, total: Number(row.total) };
}
