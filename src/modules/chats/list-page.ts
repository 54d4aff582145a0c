import type { ServiceContext } from '../../core/context.js';
import { offsetOf } from '../../http/pagination.js';
import { batchedRow, batchInputs, forEachInput } from './prepared.js';
import { NEW_CHAT_TITLE } from './presenter.js';
import type { ChatListQuery } from './schemas.js';

/*
 * The calling key's chats (GET /api/v2/chats) in one statement, with PostgreSQL writing the
 * page's JSON as history does (history-page.ts; issue 14: it was two Drizzle statements, the rows
 * and the count, then presentChat and Fastify's serializer). The text is what `presentChat`
 * (presenter.ts) and the ChatView schema give, key for key and in the schema's order: a chat
 * without a title is "New chat"; `created_at` in UTC with six fractional digits. The chats are
 * `listChats`'s (service.ts): the key's own, not archived, of one project when asked, newest first.
 */
const CHAT = `'{"id":' || c.id
  || ',"title":' || to_json(coalesce(c.title, '${NEW_CHAT_TITLE.replace(/'/g, "''")}'))::text
  || ',"project_id":' || c.project_id
  || ',"model_configuration_id":' || c.model_configuration_id
  || ',"agent_id":' || coalesce(c.agent_id::text, 'null')
  || ',"created_at":"' || to_char(c.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"'
  || '}'`;

const MINE = `c.organization_id = $1 and c.api_key_id = $2 and c.archived_at is null
  and ($3::int is null or c.project_id = $3)`;

/** $1 organization, $2 API key, $3 project or null, $4 page size, $5 offset. */
const CHAT_LIST = `with page as (
  select c.* from chats c where ${MINE}
  order by c.created_at desc, c.id desc limit $4 offset $5
)
select
  (select count(*)::int from chats c where ${MINE}) as total,
  '[' || coalesce((select string_agg(${CHAT}, ',' order by c.created_at desc, c.id desc) from page c), '') || ']' as chats`;

const TYPES = ['int', 'int', 'int', 'int', 'int'];

const LIST_STATEMENT = {
  name: 'chat_list',
  types: TYPES,
  text: CHAT_LIST,
  batch: `select i.n, l.total, l.chats from ${batchInputs(TYPES)} cross join lateral (${forEachInput(CHAT_LIST)}) l`,
};

/** One page of the key's chats, newest first: the chats as JSON text (an array), and the count of all. */
export async function chatListPage(
  ctx: Pick<ServiceContext, 'database' | 'principal'>,
  query: ChatListQuery,
): Promise<{ chatsJson: string; total: number }> {
  const { principal } = ctx;
  const row = await batchedRow<{ total: number; chats: string }>(ctx.database, LIST_STATEMENT, [
    principal.organizationId,
    principal.keyId,
    query.project_id ?? null,
    query.page_size,
    offsetOf(query),
  ]);
  // One row always (aggregates); its absence would be a bug, not an empty page.
  if (!row) throw new Error('chat_list returned no row');
  return { chatsJson: row.chats, total: Number(row.total) };
}
