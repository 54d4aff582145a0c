/**
 * The turn's hand-written statements (issue 14): the plan in one statement gives the rows Drizzle
 * gives, and the one-statement start writes all or nothing (credits, lease).
 */
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  chatMessages,
  chats,
  chatTurns,
  creditLedger,
  modelConfigurations,
  organizations,
  projects,
} from '../src/db/schema/index.js';
import { finishTurnAtOnce, type TurnOutcomeRecord } from '../src/turns/finish.js';
import { loadPlanRows } from '../src/turns/plan.js';
import { startTurnAtOnce, type TurnRowsInput } from '../src/turns/turn-start.js';
import { type ChatTestApp, emptyChat, startChatApp } from './chats-support.js';
import { createOrg, type TestOrg } from './helpers/app.js';

let t: ChatTestApp;
let org: TestOrg;

beforeAll(async () => {
  t = await startChatApp();
  org = await createOrg(t);
});
afterAll(async () => {
  await t.close();
});

const principalOf = (o: TestOrg, keyId: number) => ({
  kind: 'organization' as const,
  keyId,
  organizationId: o.organizationId,
  userId: null,
  role: 'admin' as const,
});

async function chatRow(chatId: number) {
  const [row] = await t.deps.database.db.select().from(chats).where(eq(chats.id, chatId));
  return row!;
}

const inputFor = (chatId: number, projectId: number): TurnRowsInput => ({
  organizationId: org.organizationId,
  projectId,
  chatId,
  leaseMs: 60_000,
  content: 'Hello there',
  prompt: null,
  model: 'fake-model',
  modelConfigurationId: org.modelConfigurationId,
  title: 'Hello there',
});

describe('the turn plan in one statement', () => {
  it('gives the chat, project and model configuration rows as Drizzle reads them', async () => {
    const chatId = await emptyChat(t, org);
    const chat = await chatRow(chatId);
    const { db } = t.deps.database;
    const plan = await loadPlanRows(t.deps.database, principalOf(org, chat.apiKeyId!), chatId);
    const [project] = await db.select().from(projects).where(eq(projects.id, chat.projectId));
    const [configuration] = await db
      .select()
      .from(modelConfigurations)
      .where(eq(modelConfigurations.id, chat.modelConfigurationId));
    expect(plan).toEqual({
      chat,
      project,
      projectAllowed: true,
      agent: null,
      agentAllowed: true,
      configuration,
    });
  });

  it('finds no chat of another key or organization, nor an archived one', async () => {
    const chatId = await emptyChat(t, org);
    const chat = await chatRow(chatId);
    const other = await createOrg(t);
    expect(await loadPlanRows(t.deps.database, principalOf(org, chat.apiKeyId! + 1000), chatId)).toBeNull();
    expect(await loadPlanRows(t.deps.database, { ...principalOf(other, chat.apiKeyId!) }, chatId)).toBeNull();
    await t.deps.database.db.update(chats).set({ archivedAt: chat.createdAt }).where(eq(chats.id, chatId));
    expect(await loadPlanRows(t.deps.database, principalOf(org, chat.apiKeyId!), chatId)).toBeNull();
  });
});

describe('the turn start in one statement', () => {
  it('writes both messages in order, the running turn and the title', async () => {
    const chatId = await emptyChat(t, org);
    const chat = await chatRow(chatId);
    const started = await startTurnAtOnce(t.deps.database, inputFor(chatId, chat.projectId));
    if (typeof started === 'string') throw new Error(`not started: ${started}`);
    expect(started.userMessageId).toBeLessThan(started.assistantMessageId);
    const { db } = t.deps.database;
    const messages = await db.select().from(chatMessages).where(eq(chatMessages.chatId, chatId));
    expect(messages.map((m) => [m.id, m.role, m.status, m.content])).toEqual([
      [started.userMessageId, 'user', 'completed', 'Hello there'],
      [started.assistantMessageId, 'assistant', 'generating', ''],
    ]);
    const [turn] = await db.select().from(chatTurns).where(eq(chatTurns.id, started.turnId));
    expect(turn).toMatchObject({
      chatId,
      status: 'running',
      userMessageId: started.userMessageId,
      assistantMessageId: started.assistantMessageId,
    });
    expect((await chatRow(chatId)).title).toBe('Hello there');
  });

  it('writes nothing while the chat has a running turn (busy: the long way decides 409 or takeover)', async () => {
    const chatId = await emptyChat(t, org);
    const chat = await chatRow(chatId);
    const first = await startTurnAtOnce(t.deps.database, inputFor(chatId, chat.projectId));
    expect(typeof first).toBe('object');
    const before = await chatRow(chatId);
    const second = await startTurnAtOnce(t.deps.database, {
      ...inputFor(chatId, chat.projectId),
      content: 'second',
    });
    expect(second).toBe('busy');
    const { db } = t.deps.database;
    const messages = await db.select().from(chatMessages).where(eq(chatMessages.chatId, chatId));
    expect(messages.map((m) => m.content)).toEqual(['Hello there', '']);
    expect(await chatRow(chatId)).toEqual(before);
  });

  it('writes nothing when the balance is not above zero (402)', async () => {
    const poor = await createOrg(t);
    const chatId = await emptyChat(t, poor);
    const chat = await chatRow(chatId);
    const { db } = t.deps.database;
    await db.update(organizations).set({ creditBalance: 0 }).where(eq(organizations.id, poor.organizationId));
    const started = await startTurnAtOnce(t.deps.database, {
      ...inputFor(chatId, chat.projectId),
      organizationId: poor.organizationId,
      modelConfigurationId: poor.modelConfigurationId,
    });
    expect(started).toBe('unfunded');
    expect(await db.select().from(chatMessages).where(eq(chatMessages.chatId, chatId))).toEqual([]);
    expect(await db.select().from(chatTurns).where(eq(chatTurns.chatId, chatId))).toEqual([]);
    expect(await chatRow(chatId)).toEqual(chat);
  });
});

describe('the end of a reply kept in history in one statement', () => {
  async function started() {
    const chatId = await emptyChat(t, org);
    const chat = await chatRow(chatId);
    const ids = await startTurnAtOnce(t.deps.database, inputFor(chatId, chat.projectId));
    if (typeof ids === 'string') throw new Error(`not started: ${ids}`);
    const record: TurnOutcomeRecord = {
      ...ids,
      chatId,
      projectId: chat.projectId,
      text: 'Hi!',
      annotations: { citations: [] },
      usage: { inputTokens: 1000, outputTokens: 500 },
      charge: {
        organizationId: org.organizationId,
        projectId: chat.projectId,
        apiKeyId: chat.apiKeyId,
        modelConfigurationId: org.modelConfigurationId,
        prices: { creditsPer1kInputTokens: 2, creditsPer1kOutputTokens: 4 },
        reference: `message:${ids.assistantMessageId}`,
      },
      end: { kind: 'completed' },
    };
    return record;
  }
  const ledgerOf = (reference: string) =>
    t.deps.database.db.select().from(creditLedger).where(eq(creditLedger.reference, reference));
  const balance = async () => {
    const [row] = await t.deps.database.db
      .select({ balance: organizations.creditBalance })
      .from(organizations)
      .where(eq(organizations.id, org.organizationId));
    return Number(row!.balance);
  };

  it('releases the lease, charges, and returns the message row as Drizzle reads it', async () => {
    const record = await started();
    const before = await balance();
    const row = await finishTurnAtOnce(t.deps.database, record);
    const { db } = t.deps.database;
    const [stored] = await db
      .select()
      .from(chatMessages)
      .where(eq(chatMessages.id, record.assistantMessageId));
    expect(row).toEqual(stored);
    expect(stored).toMatchObject({
      status: 'completed',
      content: 'Hi!',
      inputTokens: 1000,
      outputTokens: 500,
      credits: 4,
      error: null,
    });
    const [turn] = await db.select().from(chatTurns).where(eq(chatTurns.id, record.turnId));
    expect(turn!.status).toBe('completed');
    expect((await ledgerOf(record.charge.reference)).map((l) => [l.kind, l.amount])).toEqual([['usage', -4]]);
    expect(await balance()).toBe(before - 4);
  });

  it('writes nothing when the turn is no longer running (its end was written elsewhere)', async () => {
    const record = await started();
    const { db } = t.deps.database;
    await db.update(chatTurns).set({ status: 'expired' }).where(eq(chatTurns.id, record.turnId));
    const before = await balance();
    expect(await finishTurnAtOnce(t.deps.database, { ...record, end: { kind: 'cancelled' } })).toBeNull();
    const [message] = await db
      .select()
      .from(chatMessages)
      .where(eq(chatMessages.id, record.assistantMessageId));
    expect(message!.status).toBe('generating');
    expect(await ledgerOf(record.charge.reference)).toEqual([]);
    expect(await balance()).toBe(before);
  });
});
