import type { LanguageModelV3 } from '@ai-sdk/provider';
import type { ModelMessage, Tool } from 'ai';
import type { Queryable } from '../db/client.js';
import type { MessageRow } from '../db/schema/index.js';
import { KNOWLEDGE_SEARCH_TOOL } from '../llm/builtin-model.js';
import type { PreparedAttachment } from '../modules/chats/attachments.js';
import type { Usage } from '../modules/credits/service.js';
import { CITATION_NOTE, PassageLedger } from './citations.js';
import { modelMessagesOf, type TurnHistory } from './model-input.js';
import {
  type StructuredOutput,
  settleStructuredOutput,
  structuredOutputInstruction,
  withStructuredOutput,
} from './structured-output.js';

/** What a turn's request added to the plain turn (issue 18): each optional. */
export interface TurnAdditionsInput {
  /** `response_format`, compiled. */
  structured?: StructuredOutput;
  /** POST .../messages/:message_id/regenerate: a new reply to this user message, replacing that reply. */
  regenerate?: { userMessageId: number; replacedMessageId: number };
  /** Checked attachments of the user message, stored with it (src/modules/chats/attachments.ts). */
  attachments?: PreparedAttachment[];
}

/** Fields of the assistant message written with the reply (finish.ts). */
export type MessageAnnotations = Partial<Pick<MessageRow, 'parsed' | 'citations'>>;

/**
 * The hooks the turn runner calls for the issue-18 additions, so that runner.ts only calls them:
 * the model and system prompt of a structured reply, whether text deltas are held back, and the
 * reply's settling (validation, repair) before it is written.
 */
export class TurnAdditions {
  /** The passages `knowledge_search` returned in this turn, numbered for `[n]` citations. */
  private readonly passages = new PassageLedger();
  private citing = false;

  constructor(private readonly input: TurnAdditionsInput) {}

  /** The turn's tools, `knowledge_search` numbering its passages. */
  tools(tools: Record<string, Tool>): Record<string, Tool> {
    this.citing = KNOWLEDGE_SEARCH_TOOL in tools;
    return this.passages.wrapTools(tools);
  }

  /**
   * Whether the turn needs the AI SDK's model path rather than the lean client (text only): a
   * schema (its `responseFormat`), or a message with parts (attachments).
   */
  needsSdk(messages: ModelMessage[]): boolean {
    return this.input.structured !== undefined || messages.some((m) => typeof m.content !== 'string');
  }

  /** A turn without additions: its request and reply are the chat's plain history. */
  get plain(): boolean {
    const { structured, regenerate, attachments } = this.input;
    return structured === undefined && regenerate === undefined && !attachments?.length;
  }

  /** A structured reply is streamed as one `content` event once valid, not delta by delta. */
  get holdsText(): boolean {
    return this.input.structured !== undefined;
  }

  /** The conversation as the model receives it (model-input.ts). */
  modelMessages(db: Queryable, history: TurnHistory): Promise<ModelMessage[]> {
    return modelMessagesOf(db, history.rows, {
      uptoMessageId: this.input.regenerate?.userMessageId,
      attached: history.attached,
    });
  }

  /** The system prompt with the citation instruction (when knowledge_search is offered) and the schema. */
  system(base: string): string {
    const { structured } = this.input;
    const parts = [base];
    if (this.citing) parts.push(CITATION_NOTE);
    if (structured) parts.push(structuredOutputInstruction(structured));
    return parts.join('\n\n');
  }

  model(model: LanguageModelV3): LanguageModelV3 {
    const { structured } = this.input;
    return structured ? withStructuredOutput(model, structured) : model;
  }

  /**
   * The reply as it is written: validated (and repaired once) when structured. Adds a repair's
   * tokens to `usage`.
   */
  async settle(
    text: string,
    usage: Usage,
    turn: { db: Queryable; organizationId: number; repairModel: () => LanguageModelV3; signal: AbortSignal },
  ): Promise<{ text: string; annotations: MessageAnnotations }> {
    const { structured } = this.input;
    const annotations: MessageAnnotations = {};
    if (structured) {
      try {
        const settled = await settleStructuredOutput(structured, text, {
          model: turn.repairModel(),
          signal: turn.signal,
        });
        addUsage(usage, settled.usage);
        text = settled.text;
        annotations.parsed = settled.parsed;
      } catch (err) {
        const spent = (err as { usage?: Usage }).usage;
        if (spent) addUsage(usage, spent);
        throw err;
      }
    }
    annotations.citations = await this.passages.citationsOf(turn.db, turn.organizationId, text);
    return { text, annotations };
  }
}

function addUsage(usage: Usage, more: Usage) {
  usage.inputTokens += more.inputTokens;
  usage.outputTokens += more.outputTokens;
}
