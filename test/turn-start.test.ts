/**
 * The turn's hand-written statements (issue 14): the plan in one statement gives the rows Drizzle
 * gives, the one-statement start writes all or nothing (credits, lease), and the opening statement
 * of a plain message (plan, start, history and tool servers at once) reads what the separate
 * statements read and writes nothing for a turn it refuses.
 */
import { eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServiceContext } from '../src/core/context.js';
import {
  agentSkills,
  agents,
  chatAttachments,
  chatMessages,
  chats,
  chatTurns,
  creditLedger,
  integrations,
  modelConfigurations,
  organizations,
  projects,
  skills,
} from '../src/db/schema/index.js';
import { checkPlan } from '../src/modules/chats/service.js';
import { integrationsForProject } from '../src/modules/integrations/service.js';
import { finishTurnAtOnce, type TurnOutcomeRecord } from '../src/turns/finish.js';
import { turnHistory } from '../src/turns/model-input.js';
import { loadPlanRows } from '../src/turns/plan.js';
import { skillsOfAgent } from '../src/turns/system-prompt.js';
import { openTurn } from '../src/turns/turn-open.js';
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

describe('a plain message opened in one statement (plan, start, history, tool servers)', () => {
  const openInput = { content: 'Next question', title: 'Next question', leaseMs: 60_000, historyLimit: 100 };
  const { db } = { db: () => t.deps.database.db };
  const messagesOf = (chatId: number) =>
    db().select().from(chatMessages).where(eq(chatMessages.chatId, chatId)).orderBy(chatMessages.id);
  const turnsOf = (chatId: number) => db().select().from(chatTurns).where(eq(chatTurns.chatId, chatId));

  /** A conversation with every kind of message the history filter tells apart. */
  async function chatWithHistory() {
    const chatId = await emptyChat(t, org);
    const chat = await chatRow(chatId);
    const base = { organizationId: org.organizationId, chatId };
    const add = async (role: 'user' | 'assistant', content: string, status: string, extra = {}) => {
      const [row] = await db()
        .insert(chatMessages)
        .values({ ...base, role, content, status: status as never, ...extra })
        .returning();
      return row!;
    };
    const first = await add('user', 'first', 'completed');
    await db()
      .insert(chatAttachments)
      .values({
        ...base,
        messageId: first.id,
        position: 0,
        type: 'image',
        mediaType: 'image/png',
        sizeBytes: 1,
        data: Buffer.from([1]),
      });
    const newer = await add('assistant', 'newer reply', 'completed');
    await add('assistant', 'replaced reply', 'completed', { replacedById: newer.id });
    await add('user', 'failed question', 'failed');
    await add('assistant', '', 'failed', { error: 'boom' });
    await add('user', 'second', 'completed', { prompt: 'the skill prompt' });
    await add('assistant', 'stopped by a cancel', 'cancelled');
    await add('assistant', 'cancelled with an error', 'cancelled', { error: 'gone' });
    await add('assistant', '', 'generating');
    return chat;
  }

  const contextOf = (principal: ReturnType<typeof principalOf>) =>
    ({ database: t.deps.database, principal }) as unknown as ServiceContext;

  it('reads what the plan, the history and the tool servers read, and writes what the start writes', async () => {
    const chat = await chatWithHistory();
    const principal = principalOf(org, chat.apiKeyId!);
    const [shared] = await db()
      .insert(integrations)
      .values({
        organizationId: org.organizationId,
        name: 'Docs',
        slug: `docs-${chat.id}`,
        url: 'http://127.0.0.1:9/mcp',
        headerNames: ['x-a'],
      })
      .returning();
    await db()
      .insert(integrations)
      .values({
        organizationId: org.organizationId,
        name: 'Off',
        slug: `off-${chat.id}`,
        url: 'http://127.0.0.1:9/mcp',
        enabled: false,
      });
    const planBefore = await loadPlanRows(t.deps.database, principal, chat.id);
    const opened = await openTurn(t.deps.database, principal, chat.id, openInput);
    expect(opened?.plan).toEqual(planBefore);
    expect(opened).toMatchObject({ usable: true, funded: true });
    const started = opened!.started!;
    const after = await turnHistory(t.deps.database.db, chat.id, 100);
    const asModelSees = (rows: { id: number; role: string; content: string; prompt: string | null }[]) =>
      rows.map(({ id, role, content, prompt }) => ({ id, role, content, prompt }));
    expect(started.history!.rows).toEqual(asModelSees(after.rows));
    expect([...started.history!.attached]).toEqual([...after.attached]);
    expect(after.attached.size).toBe(1);
    expect(started.history!.rows.map((m) => m.content)).toEqual([
      'first',
      'newer reply',
      'second',
      'stopped by a cancel',
      'Next question',
    ]);
    const ctx = contextOf(principal);
    const tools = await integrationsForProject(ctx, chat.projectId);
    expect(tools.map((r) => r.id)).toContain(shared!.id);
    expect(started.integrations).toEqual(tools);

    // The start's rows, as startTurnAtOnce writes them.
    const messages = await messagesOf(chat.id);
    const [user, assistant] = messages.slice(-2);
    expect([user, assistant].map((m) => [m!.id, m!.role, m!.status, m!.content, m!.model])).toEqual([
      [started.ids.userMessageId, 'user', 'completed', 'Next question', null],
      [started.ids.assistantMessageId, 'assistant', 'generating', '', planBefore!.configuration!.model],
    ]);
    const [turn] = await db().select().from(chatTurns).where(eq(chatTurns.id, started.ids.turnId));
    expect(turn).toMatchObject({
      chatId: chat.id,
      status: 'running',
      userMessageId: user!.id,
      assistantMessageId: assistant!.id,
    });
    expect((await chatRow(chat.id)).title).toBe('Next question');
  });

  it("reads an agent's skills as skillsOfAgent does (deleted ones left out)", async () => {
    const chatId = await emptyChat(t, org);
    const chat = await chatRow(chatId);
    const principal = principalOf(org, chat.apiKeyId!);
    const [agent] = await db()
      .insert(agents)
      .values({ organizationId: org.organizationId, name: `Skilled ${chatId}` })
      .returning();
    const skill = (name: string, deleted = false) =>
      db()
        .insert(skills)
        .values({
          organizationId: org.organizationId,
          name,
          slug: `${name.toLowerCase()}-${chatId}`,
          description: `${name} things`,
          content: 'Do it',
          ...(deleted ? { deletedAt: sql`now()` } : {}),
        })
        .returning();
    const made = [...(await skill('Zeta')), ...(await skill('Alpha')), ...(await skill('Gone', true))];
    await db()
      .insert(agentSkills)
      .values(made.map((s) => ({ agentId: agent!.id, skillId: s.id })));
    await db().update(chats).set({ agentId: agent!.id }).where(eq(chats.id, chatId));
    const opened = await openTurn(t.deps.database, principal, chatId, openInput);
    const expected = (await skillsOfAgent(db(), agent!.id)).map(({ name, slug, description }) => ({
      name,
      slug,
      description,
    }));
    expect(expected.map((s) => s.name)).toEqual(['Alpha', 'Zeta']);
    expect(opened!.started!.skills).toEqual(expected);
  });

  it('keeps the newest messages within the history limit, the new one included', async () => {
    const chat = await chatWithHistory();
    const principal = principalOf(org, chat.apiKeyId!);
    const opened = await openTurn(t.deps.database, principal, chat.id, { ...openInput, historyLimit: 3 });
    const after = await turnHistory(t.deps.database.db, chat.id, 3);
    expect(opened!.started!.history!.rows.map((m) => m.id)).toEqual(after.rows.map((m) => m.id));
    expect(after.rows).toHaveLength(3);
  });

  it('writes nothing while the chat has a running turn (busy), and logs no error for it', async () => {
    const chatId = await emptyChat(t, org);
    const chat = await chatRow(chatId);
    const principal = principalOf(org, chat.apiKeyId!);
    const first = await openTurn(t.deps.database, principal, chatId, openInput);
    expect(first!.started).not.toBeNull();
    const before = await chatRow(chatId);
    const messages = await messagesOf(chatId);
    const second = await openTurn(t.deps.database, principal, chatId, { ...openInput, content: 'again' });
    expect(second).toMatchObject({ usable: true, funded: true, started: null });
    expect(await messagesOf(chatId)).toEqual(messages);
    expect(await turnsOf(chatId)).toHaveLength(1);
    expect(await chatRow(chatId)).toEqual(before);
  });

  it('refuses exactly what the checks refuse, writing nothing', async () => {
    const other = await createOrg(t);
    const refusals: [string, (chatId: number) => Promise<unknown>, number | null][] = [
      [
        'archived project',
        (id) => db().update(projects).set({ archivedAt: sql`now()` }).where(eq(projects.id, id)),
        404,
      ],
      [
        'deleted project',
        (id) => db().update(projects).set({ deletedAt: sql`now()` }).where(eq(projects.id, id)),
        404,
      ],
      [
        'embedding model',
        async (id) => {
          const [model] = await db()
            .insert(modelConfigurations)
            .values({
              organizationId: other.organizationId,
              name: `E${id}`,
              provider: 'openai-compatible',
              model: 'e',
              purpose: 'embedding',
            })
            .returning();
          await db().update(chats).set({ modelConfigurationId: model!.id }).where(eq(chats.projectId, id));
        },
        400,
      ],
      [
        'deleted model',
        (id) =>
          db()
            .update(modelConfigurations)
            .set({ deletedAt: sql`now()` })
            .where(eq(modelConfigurations.id, id)),
        404,
      ],
      [
        'deleted agent',
        async (id) => {
          const [agent] = await db()
            .insert(agents)
            .values({ organizationId: other.organizationId, name: `A${id}`, deletedAt: sql`now()` })
            .returning();
          await db().update(chats).set({ agentId: agent!.id }).where(eq(chats.projectId, id));
        },
        404,
      ],
      [
        'live agent',
        async (id) => {
          const [agent] = await db()
            .insert(agents)
            .values({ organizationId: other.organizationId, name: `L${id}` })
            .returning();
          await db().update(chats).set({ agentId: agent!.id }).where(eq(chats.projectId, id));
        },
        null,
      ],
      [
        'no credits',
        () =>
          db()
            .update(organizations)
            .set({ creditBalance: 0 })
            .where(eq(organizations.id, other.organizationId)),
        402,
      ],
    ];
    for (const [name, breakIt, status] of refusals) {
      await db()
        .update(organizations)
        .set({ creditBalance: 100 })
        .where(eq(organizations.id, other.organizationId));
      const [project] = await db()
        .insert(projects)
        .values({ organizationId: other.organizationId, name: `P ${name}` })
        .returning();
      const chatId = await emptyChat(t, { ...other, projectId: project!.id });
      const chat = await chatRow(chatId);
      const id = name.includes('deleted model') ? chat.modelConfigurationId : project!.id;
      await breakIt(id);
      const principal = principalOf(other, chat.apiKeyId!);
      const opened = await openTurn(t.deps.database, principal, chatId, openInput);
      let refused: number | null = null;
      try {
        checkPlan(opened!.plan);
        if (!opened!.funded) refused = 402;
      } catch (err) {
        refused = (err as { status: number }).status;
      }
      expect([name, refused]).toEqual([name, status]);
      expect([name, opened!.started !== null]).toEqual([name, status === null]);
      if (status !== null) {
        expect([name, await messagesOf(chatId)]).toEqual([name, []]);
        expect([name, await turnsOf(chatId)]).toEqual([name, []]);
      }
      if (name === 'deleted model')
        await db().update(modelConfigurations).set({ deletedAt: null }).where(eq(modelConfigurations.id, id));
    }
  });

  it('reads the history again when the turn it waited for ended meanwhile (its reply is not in the snapshot)', async () => {
    const { database } = t.deps;
    // PGlite has one connection: no other transaction can hold the lease while a statement runs.
    if (!database.pool) return;
    const chatId = await emptyChat(t, org);
    const chat = await chatRow(chatId);
    const principal = principalOf(org, chat.apiKeyId!);
    const first = await openTurn(database, principal, chatId, openInput);
    const ids = first!.started!.ids;
    // The first turn's end, written by another connection and not committed yet.
    const other = await database.pool.connect();
    try {
      await other.query('begin');
      await other.query(`update chat_turns set status = 'completed', finished_at = now() where id = $1`, [
        ids.turnId,
      ]);
      await other.query(
        `update chat_messages set status = 'completed', content = 'First reply' where id = $1`,
        [ids.assistantMessageId],
      );
      let settled = false;
      const second = openTurn(database, principal, chatId, { ...openInput, content: 'Second' }).finally(
        () => {
          settled = true;
        },
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(settled).toBe(false); // waiting for the lease
      await other.query('commit');
      const opened = await second;
      expect(opened!.started).not.toBeNull();
      expect(opened!.started!.history).toBeNull();
    } finally {
      other.release();
    }
    // What the turn then reads has the first reply.
    const history = await turnHistory(database.db, chatId, 100);
    expect(history.rows.map((m) => m.content)).toEqual(['Next question', 'First reply', 'Second']);
  });

  it('refuses a member without access to the project (401), writing nothing', async () => {
    const chatId = await emptyChat(t, org);
    const chat = await chatRow(chatId);
    const member = {
      ...principalOf(org, chat.apiKeyId!),
      kind: 'personal' as const,
      role: 'member' as const,
      userId: 2_000_000_000,
    };
    const opened = await openTurn(t.deps.database, member as never, chatId, openInput);
    expect(opened).toMatchObject({ usable: false, started: null });
    expect(() => checkPlan(opened!.plan)).toThrow(expect.objectContaining({ status: 401 }));
    expect(await messagesOf(chatId)).toEqual([]);
  });
});
