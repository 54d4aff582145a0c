import type { ChatAttachmentRow, ChatRow, MessageRow, ToolExecutionRow } from '../../db/schema/index.js';
import { formatTimestamp } from '../../http/timestamps.js';
import { presentAttachment } from './attachments.js';
import type { ChatView, MessageView, ToolExecutionView } from './schemas.js';

export const NEW_CHAT_TITLE = 'New chat';

export function presentChat(row: ChatRow, messageCount?: number): ChatView {
  return {
    id: row.id,
    title: row.title ?? NEW_CHAT_TITLE,
    project_id: row.projectId,
    model_configuration_id: row.modelConfigurationId,
    agent_id: row.agentId,
    created_at: formatTimestamp(row.createdAt),
    ...(messageCount === undefined ? {} : { message_count: messageCount }),
  };
}

export const presentToolExecution = (row: ToolExecutionRow): ToolExecutionView => ({
  id: row.id,
  tool_name: row.toolName,
  tool_call_id: row.toolCallId,
  status: row.status,
  parameters: row.parameters,
  result: row.result ?? null,
  error: row.error ?? null,
  execution_time_ms: row.executionTimeMs,
});

/** The message's state as clients read it; a legacy row stopped by a shutdown counts as failed. */
function messageStatus(row: MessageRow): MessageView['status'] {
  if (row.status === 'cancelled') return row.error === null ? 'cancelled' : 'failed';
  return row.status === 'failed' ? 'failed' : 'completed';
}

/**
 * Spec fields, then additions: `status` (`completed`, `cancelled`, or `failed` on both messages of
 * a turn that failed), and on assistant messages `usage` (tokens the model reported over every
 * step, and the credits charged for them, as in the ledger) and `cancelled: true` on a reply a
 * cancel request stopped.
 */
export const presentMessage = (
  row: MessageRow,
  executions: ToolExecutionRow[] = [],
  attachments: Omit<ChatAttachmentRow, 'data'>[] = [],
): MessageView => ({
  id: row.id,
  role: row.role,
  content: row.content,
  model: row.role === 'user' ? null : row.model,
  created_at: formatTimestamp(row.createdAt),
  tool_executions: executions.map(presentToolExecution),
  status: messageStatus(row),
  ...(row.role === 'assistant'
    ? {
        usage: {
          input_tokens: row.inputTokens,
          output_tokens: row.outputTokens,
          credits: Number(row.credits),
        },
      }
    : {}),
  ...(messageStatus(row) === 'cancelled' ? { cancelled: true as const } : {}),
  citations: row.citations,
  attachments: attachments.map(presentAttachment),
  ...(row.parsed === null || row.parsed === undefined ? {} : { parsed: row.parsed }),
});
