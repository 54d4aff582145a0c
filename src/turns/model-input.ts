import type { ModelMessage } from 'ai';
import type { Queryable } from '../db/client.js';
import type { MessageRow } from '../db/schema/index.js';

export interface ModelInputOptions {
  /** A regeneration: the conversation up to the user message answered again (its old reply left out). */
  uptoMessageId?: number;
}

/**
 * The one place the conversation becomes the model's message list, whatever client calls the model:
 * each message's text (a skill's expanded prompt in place of its slash command), oldest first.
 */
export async function modelMessagesOf(
  _db: Queryable,
  history: MessageRow[],
  options: ModelInputOptions = {},
): Promise<ModelMessage[]> {
  const { uptoMessageId } = options;
  const rows = uptoMessageId === undefined ? history : history.filter((m) => m.id <= uptoMessageId);
  return rows
    .map((m) => ({ role: m.role, content: m.prompt ?? m.content }))
    .filter((m) => m.content.length > 0);
}
