import { performance } from 'node:perf_hooks';
import {
  type EarlyRequest,
  type LeanModel,
  type ModelResponse,
  post,
  type SentRequest,
} from './lean-client.js';

/** Who may have a chat's next request sent early: the same organization and API key as its last turn. */
export interface RequestOwner {
  organizationId: number;
  keyId: number | null;
}

/** What shapes a chat's requests besides its messages, as the runner knows it (the payload decides). */
export interface RequestContext {
  projectId: number;
  agentId: number | null;
  modelConfigurationId: number;
}

interface NextRequest extends RequestOwner {
  model: LeanModel;
  /** The payload up to the new message: the last request's messages and its reply (SentRequest.head). */
  head: string;
  tail: string;
  /**
   * `head` holds no message yet (it ends with the array's `[`). Kept rather than read off `head`:
   * reading a concatenated head's last character copies it flat first.
   */
  empty: boolean;
}

export type SpeculationOutcome = 'used' | 'dropped';

/** New chats' first requests kept, by owner and context (the oldest go first). */
const MAX_FIRST_REQUESTS = 1000;

/**
 * Payloads kept at most (the oldest go first). A chat's entry is needed from its turn's end to its
 * next message; chats that get none keep theirs until pushed out, so the bound is what stays in
 * the heap. 4 MB holds an entry for seconds at 240 replies a second (docs/decisions.md).
 */
const MAX_PAYLOAD_BYTES = 4 * 1024 * 1024;

const contextKey = (owner: RequestOwner, context: RequestContext) =>
  `${owner.organizationId}:${owner.keyId}:${context.projectId}:${context.agentId}:${context.modelConfigurationId}`;

/**
 * The model request of a chat's next plain message, sent while the turn's opening statement runs
 * (docs/decisions.md, "The model request before the turn's statement answers"): after a turn of
 * the lean client ends with a reply and no tool call, the chat's next request is that turn's
 * request with the reply and the next message appended, as long as nothing else changed. The
 * next message of the same key to the chat sends it at once; the turn takes its response only
 * when the payload it builds from what the statement read is byte for byte the one sent, and
 * drops (aborts) it otherwise or when the turn is refused. What the model receives is therefore
 * always what the turn would have sent; only its time moves.
 *
 * Kept per process, for the chats whose last turn ran here, up to `maxBytes` of payloads (the
 * oldest go first). A chat's entry is used once: a turn started on it forgets it until it ends.
 * A chat created empty here gets the first request of its context (the same key, project, agent
 * and model), taken from the last turn that ended in that context: its system prompt and tools.
 */
export class SpeculativeRequests {
  private readonly next = new Map<number, NextRequest>();
  private bytes = 0;
  /** By contextKey: a new chat's request up to its first message (SentRequest.base), and its tail. */
  private readonly firsts = new Map<string, Pick<NextRequest, 'model' | 'head' | 'tail' | 'empty'>>();

  constructor(
    private readonly count: (outcome: SpeculationOutcome) => void = () => {},
    /** Payloads kept at most; 0 keeps nothing and sends nothing early (EARLY_MODEL_REQUESTS=false). */
    private readonly maxBytes = MAX_PAYLOAD_BYTES,
  ) {}

  /**
   * A turn ended with `reply` after one request, `sent`. Its next request holds that request's
   * messages, the reply and the next message, unless the history limit (messages sent, the new
   * one included) would drop the oldest: then the statement's history decides and nothing is kept.
   */
  remember(
    chatId: number,
    owner: RequestOwner,
    context: RequestContext,
    sent: SentRequest,
    reply: string,
    historyLimit: number,
  ): void {
    this.forget(chatId);
    if (this.maxBytes === 0 || sent.count + 2 > historyLimit) return;
    const key = contextKey(owner, context);
    this.firsts.delete(key);
    this.firsts.set(key, {
      model: sent.model,
      head: sent.base,
      tail: sent.tail,
      empty: sent.base.endsWith('['),
    });
    for (const oldest of this.firsts.keys()) {
      if (this.firsts.size <= MAX_FIRST_REQUESTS) break;
      this.firsts.delete(oldest);
    }
    this.keep(chatId, {
      organizationId: owner.organizationId,
      keyId: owner.keyId,
      model: sent.model,
      head: withMessage(sent.head, sent.head.endsWith('['), 'assistant', reply),
      tail: sent.tail,
      empty: false,
    });
  }

  /** A chat created empty by `owner`: its first request is its context's, if one ended here. */
  created(chatId: number, owner: RequestOwner, context: RequestContext): void {
    const first = this.firsts.get(contextKey(owner, context));
    if (first) this.keep(chatId, { organizationId: owner.organizationId, keyId: owner.keyId, ...first });
  }

  private keep(chatId: number, entry: NextRequest): void {
    this.forget(chatId);
    const size = entry.head.length + entry.tail.length;
    if (size > this.maxBytes) return;
    this.next.set(chatId, entry);
    this.bytes += size;
    for (const [oldest, old] of this.next) {
      if (this.bytes <= this.maxBytes) break;
      this.next.delete(oldest);
      this.bytes -= old.head.length + old.tail.length;
    }
  }

  /** A turn starts on the chat (or it changed): its next request is unknown until the turn ends. */
  forget(chatId: number): void {
    const entry = this.next.get(chatId);
    if (!entry) return;
    this.next.delete(chatId);
    this.bytes -= entry.head.length + entry.tail.length;
  }

  /** Sends the chat's next request with `content` as the new message, when this process knows it. */
  send(chatId: number, owner: RequestOwner, content: string): EarlyRequest | null {
    const entry = this.next.get(chatId);
    // Another key's message is refused (or, were it let in, its turn forgets the entry: `forget`).
    if (!entry || entry.organizationId !== owner.organizationId || entry.keyId !== owner.keyId) return null;
    this.forget(chatId);
    return new SpeculativeRequest(
      entry.model,
      withMessage(entry.head, entry.empty, 'user', content) + entry.tail,
      this.count,
    );
  }
}

/** `head` with one more text message (the JSON the lean client writes for it). */
const withMessage = (head: string, empty: boolean, role: 'user' | 'assistant', content: string) =>
  `${head}${empty ? '' : ','}${JSON.stringify({ role, content })}`;

class SpeculativeRequest implements EarlyRequest {
  readonly sentAt = performance.now();
  taken = false;
  private readonly controller = new AbortController();
  private response: Promise<ModelResponse> | null = null;
  private answered: ModelResponse | null = null;
  private settled = false;

  constructor(
    private readonly model: LeanModel,
    private readonly payload: string,
    private readonly count: (outcome: SpeculationOutcome) => void,
  ) {
    try {
      this.response = post(model, payload, this.controller.signal);
      this.response.then(
        (response) => {
          this.answered = response;
        },
        // Dropped requests fail with the abort; a taken one's failure goes to its taker.
        () => {},
      );
    } catch {
      // The URL guard refused it: the turn's own request gets the same answer.
      this.settled = true;
    }
  }

  get firstDataAt(): number | null {
    return this.answered?.firstDataAt ?? null;
  }

  take(model: LeanModel, payload: string, signal: AbortSignal): Promise<ModelResponse> | null {
    if (this.settled) return null;
    if (model !== this.model || payload !== this.payload) {
      this.drop();
      return null;
    }
    this.settled = true;
    this.taken = true;
    this.count('used');
    // The turn's abort (cancel, watchdog, shutdown) now ends this request.
    if (signal.aborted) this.controller.abort(signal.reason);
    else signal.addEventListener('abort', () => this.controller.abort(signal.reason), { once: true });
    return this.response;
  }

  drop(): void {
    if (this.settled) return;
    this.settled = true;
    this.count('dropped');
    this.controller.abort(new Error('The early model request was not used'));
  }
}
