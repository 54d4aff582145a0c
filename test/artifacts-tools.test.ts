import { stepCountIs, streamText, tool } from 'ai';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ServiceContext } from '../src/core/context.js';
import { agentSkills, agents, artifacts, webhookEvents } from '../src/db/schema/index.js';
import { toolFamilies } from '../src/llm/tools/index.js';
import { collectTools, type ToolFamily } from '../src/llm/tools/registry.js';
import { generateArtifact } from '../src/modules/artifacts/generation.js';
import { resolveModel } from '../src/modules/model-configurations/resolve.js';
import {
  createArtifactType,
  createSkill,
  postStream,
  serviceContextFor,
  useFakeModel,
} from './artifacts-fixtures.js';
import { call, createOrg, expectStatus, startTestServer, type TestApp, type TestOrg } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

/** A knowledge family standing in for the real one: one search tool with a fixed passage. */
const knowledgeFamily: ToolFamily = async () => ({
  tools: {
    knowledge_search: tool({
      description: 'Search the knowledge base',
      inputSchema: z.object({ query: z.string() }),
      execute: async ({ query }) => ({
        passages: [{ document_name: 'Handbook', text: `Offsites happen in May (asked: ${query})`, score: 1 }],
      }),
    }),
  },
  notes: [],
});

describe('artifacts and skills tools', () => {
  let t: TestApp;
  let fake: FakeModelServer;
  let org: TestOrg;
  let ctx: ServiceContext;
  let memoSkillId: number;
  let plainSkillId: number;
  const CHAT_ID = 4242;

  /** One chat-like turn: the fake model asks for tools, the real AI SDK runs them. */
  async function turn(enabled: ('artifacts' | 'skills')[], agentId: number | null = null) {
    const toolSet = await collectTools(toolFamilies, enabled, {
      ctx,
      projectId: org.projectId,
      chatId: CHAT_ID,
      agentId,
    });
    const { model } = await resolveModel(ctx, null);
    const result = streamText({
      model,
      messages: [{ role: 'user', content: 'Please do it' }],
      tools: toolSet.tools,
      stopWhen: stepCountIs(4),
    });
    await result.consumeStream();
    return { toolSet, steps: await result.steps };
  }

  const toolResults = (steps: Awaited<ReturnType<typeof turn>>['steps']) =>
    steps
      .flatMap((step) => step.content)
      .filter((part) => part.type === 'tool-result' || part.type === 'tool-error');

  beforeAll(async () => {
    fake = await startFakeModelServer();
    t = await startTestServer();
    org = await createOrg(t);
    await useFakeModel(t, org, fake);
    ctx = await serviceContextFor(t, org);
    const memo = await createArtifactType(t, org, 'memo', 'Memo');
    memoSkillId = (
      await createSkill(t, org, {
        name: 'Announcement',
        content: 'Announce {custom.topic}.',
        variables: ['topic'],
        typeIds: [memo.id],
      })
    ).id;
    plainSkillId = (
      await createSkill(t, org, { name: 'Plain', content: 'Write plainly.', typeIds: [memo.id] })
    ).id;
  });
  afterAll(async () => {
    t.deps.toolFamilies = toolFamilies;
    await t.close();
    await fake.close();
  });
  beforeEach(() => fake.reset());

  it('registers both families and describes the artifact types and skills to the model', async () => {
    const toolSet = await collectTools(toolFamilies, ['artifacts', 'skills'], {
      ctx,
      projectId: org.projectId,
      chatId: CHAT_ID,
      agentId: null,
    });
    expect(Object.keys(toolSet.tools).sort()).toEqual([
      'create_artifact',
      'list_skills',
      'refine_artifact',
      'run_skill',
    ]);
    const description = toolSet.tools.create_artifact.description!;
    expect(description).toContain('memo ("Memo")');
    expect(description).toContain(`skill ${memoSkillId} "Announcement" (inputs: topic)`);
  });

  it('create_artifact makes an artifact that records the chat, with the same generation as the API', async () => {
    fake.enqueue(
      {
        toolCalls: [
          {
            id: 'call_1',
            name: 'create_artifact',
            arguments: {
              artifact_type_slug: 'memo',
              skill_id: memoSkillId,
              inputs: [{ name: 'topic', value: 'the picnic' }],
            },
          },
        ],
      },
      { text: '# Picnic memo\n\nBring food.' },
      { text: 'Done: I wrote the picnic memo.' },
    );
    const { steps } = await turn(['artifacts']);
    const requests = fake.chatRequests();
    expect(requests).toHaveLength(3);
    // The nested generation got the filled-in skill.
    expect(requests[1].body.messages.at(-1).content).toBe('Announce the picnic.');
    const [result] = toolResults(steps);
    expect(result.type).toBe('tool-result');
    const output = (result as { output: any }).output;
    expect(output).toMatchObject({
      artifact_id: expect.any(Number),
      name: 'Picnic memo',
      artifact_type_slug: 'memo',
      content: '# Picnic memo\n\nBring food.',
      url: expect.stringMatching(/\/share\/artifacts\/[\w-]{32}$/),
    });
    const [row] = await t.deps.database.db
      .select()
      .from(artifacts)
      .where(eq(artifacts.id, output.artifact_id));
    expect(row.chatId).toBe(CHAT_ID);
    const read = await call(t, 'GET', `/api/v1/artifact_types/memo/artifacts/${output.artifact_id}`, {
      key: org.orgKey,
    });
    expectStatus(read, 200);
    expect(read.body.artifact.chat_id).toBe(CHAT_ID);
    const events = await t.deps.database.db
      .select()
      .from(webhookEvents)
      .where(eq(webhookEvents.projectId, org.projectId));
    const event = events.find((e) => e.eventData.artifact_id === output.artifact_id)!;
    expect(event.eventName).toBe('artifact_generated');
    expect(event.eventData.chat_id).toBe(CHAT_ID);
    // The model saw the tool result when it answered.
    expect(JSON.stringify(requests[2].body.messages)).toContain('Picnic memo');
  });

  it('refine_artifact rewrites an artifact and keeps its chat', async () => {
    fake.enqueue({ text: '# Original' });
    const made = await generateArtifact(
      ctx,
      {
        artifactTypeSlug: 'memo',
        projectId: org.projectId,
        skillId: plainSkillId,
        inputs: [],
        chatId: CHAT_ID,
      },
      { families: toolFamilies },
    );
    fake.reset();
    fake.enqueue(
      {
        toolCalls: [
          {
            name: 'refine_artifact',
            arguments: { artifact_id: made.artifact.id, refine_prompt: 'Add a date' },
          },
        ],
      },
      { text: '# Original\n\nOn 1 May.' },
      { text: 'Updated.' },
    );
    const { steps } = await turn(['artifacts']);
    const [result] = toolResults(steps);
    expect((result as { output: any }).output).toMatchObject({
      artifact_id: made.artifact.id,
      content: '# Original\n\nOn 1 May.',
    });
    const [row] = await t.deps.database.db.select().from(artifacts).where(eq(artifacts.id, made.artifact.id));
    expect(row.content).toBe('# Original\n\nOn 1 May.');
    expect(row.chatHistory.at(-2)).toEqual({ role: 'user', content: 'Add a date' });
    const events = await t.deps.database.db
      .select()
      .from(webhookEvents)
      .where(eq(webhookEvents.eventName, 'artifact_refined'));
    expect(events.find((e) => e.eventData.artifact_id === made.artifact.id)!.eventData.chat_id).toBe(CHAT_ID);
  });

  it('gives a failed tool call back to the model as an error it can read', async () => {
    fake.enqueue(
      {
        toolCalls: [
          {
            name: 'create_artifact',
            arguments: { artifact_type_slug: 'memo', skill_id: memoSkillId, inputs: [] },
          },
        ],
      },
      { text: 'I need a topic.' },
    );
    const before = await t.deps.database.db.select({ id: artifacts.id }).from(artifacts);
    const { steps } = await turn(['artifacts']);
    const [result] = toolResults(steps);
    expect(result.type).toBe('tool-error');
    expect(String((result as { error: unknown }).error)).toContain('topic');
    expect(JSON.stringify(fake.chatRequests()[1].body.messages)).toContain('topic');
    expect(await t.deps.database.db.select({ id: artifacts.id }).from(artifacts)).toHaveLength(before.length);
  });

  it('list_skills lists every skill, or only the agent’s when it has some', async () => {
    fake.enqueue({ toolCalls: [{ name: 'list_skills', arguments: {} }] }, { text: 'Here they are.' });
    const all = toolResults((await turn(['skills'])).steps)[0] as { output: any };
    expect(all.output.skills.map((s: any) => s.id).sort()).toEqual([memoSkillId, plainSkillId].sort());
    expect(all.output.skills.find((s: any) => s.id === memoSkillId)).toEqual({
      id: memoSkillId,
      name: 'Announcement',
      description: '',
      slash_command: expect.stringMatching(/^\/announcement/),
      custom_variables: [{ name: 'topic', description: 'The topic', type: 'string' }],
      artifact_type_slugs: ['memo'],
    });

    const [agent] = await t.deps.database.db
      .insert(agents)
      .values({ organizationId: org.organizationId, name: 'Writer', tools: ['skills'] })
      .returning();
    await t.deps.database.db.insert(agentSkills).values({ agentId: agent.id, skillId: plainSkillId });
    fake.enqueue({ toolCalls: [{ name: 'list_skills', arguments: {} }] }, { text: 'Here it is.' });
    const mine = toolResults((await turn(['skills'], agent.id)).steps)[0] as { output: any };
    expect(mine.output.skills.map((s: any) => s.id)).toEqual([plainSkillId]);
  });

  it('run_skill returns the skill with its inputs filled in, and refuses skills outside the turn', async () => {
    fake.enqueue(
      {
        toolCalls: [
          {
            name: 'run_skill',
            arguments: { skill_id: memoSkillId, inputs: [{ name: 'topic', value: 'the move' }] },
          },
        ],
      },
      { text: 'Announcing the move.' },
    );
    const ran = toolResults((await turn(['skills'])).steps)[0] as { output: any };
    expect(ran.output).toEqual({
      skill_id: memoSkillId,
      name: 'Announcement',
      instructions: 'Announce the move.',
    });

    const other = await createOrg(t);
    const type = await createArtifactType(t, other, 'x');
    const foreign = await createSkill(t, other, {
      name: 'Foreign',
      content: 'Secret prompt',
      typeIds: [type.id],
    });
    fake.enqueue(
      { toolCalls: [{ name: 'run_skill', arguments: { skill_id: foreign.id, inputs: [] } }] },
      { text: 'No.' },
    );
    const refused = toolResults((await turn(['skills'])).steps)[0];
    expect(refused.type).toBe('tool-error');
    expect(JSON.stringify(fake.chatRequests())).not.toContain('Secret prompt');
  });

  it('an assistant in a chat turn creates an artifact through the artifacts tool; the artifact records the chat', async () => {
    const [agent] = await t.deps.database.db
      .insert(agents)
      .values({
        organizationId: org.organizationId,
        name: 'Scribe',
        instructions: 'Write memos.',
        tools: ['artifacts'],
      })
      .returning();
    fake.enqueue(
      {
        toolCalls: [
          {
            id: 'call_chat_1',
            name: 'create_artifact',
            arguments: {
              artifact_type_slug: 'memo',
              skill_id: memoSkillId,
              inputs: [{ name: 'topic', value: 'the launch' }],
            },
          },
        ],
      },
      { text: '# Launch memo\n\nWe launch soon.' },
      { text: 'I wrote the launch memo for you.' },
    );
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, agent_id: agent.id, content: 'Write a memo about the launch' },
    });
    expectStatus(res, 201);
    const chatId = res.body.response.chat.id as number;
    const message = res.body.response.message;
    expect(message.content).toBe('I wrote the launch memo for you.');
    const [execution] = message.tool_executions;
    expect(execution).toMatchObject({
      tool_name: 'create_artifact',
      tool_call_id: 'call_chat_1',
      status: 'completed',
    });
    const artifactId = execution.result.artifact_id as number;
    const read = await call(t, 'GET', `/api/v1/artifact_types/memo/artifacts/${artifactId}`, {
      key: org.orgKey,
    });
    expectStatus(read, 200);
    expect(read.body.artifact).toMatchObject({
      chat_id: chatId,
      name: 'Launch memo',
      content: '# Launch memo\n\nWe launch soon.',
    });
    expect(fake.chatRequests()[1].body.messages.at(-1).content).toBe('Announce the launch.');
  });

  it('offers knowledge tools during generation and records their calls in chat_history', async () => {
    t.deps.toolFamilies = { knowledge: knowledgeFamily };
    try {
      fake.enqueue(
        { toolCalls: [{ id: 'search_1', name: 'knowledge_search', arguments: { query: 'offsite month' } }] },
        { chunks: ['# Offsite\n\n', 'It is in May.'] },
      );
      const res = await postStream(
        t,
        `/api/v1/artifact_types/memo/artifacts/stream?project_id=${org.projectId}`,
        org.orgKey,
        {
          skill_id: memoSkillId,
          inputs: [{ name: 'topic', value: 'the offsite' }],
        },
      );
      expect(res.status).toBe(200);
      const done = res.data.at(-1);
      expect(done.done).toBe(true);
      const requests = fake.chatRequests();
      expect(requests[0].body.tools.map((tl: any) => tl.function.name)).toEqual(['knowledge_search']);
      expect(JSON.stringify(requests[1].body.messages)).toContain('Offsites happen in May');
      const read = await call(t, 'GET', `/api/v1/artifact_types/memo/artifacts/${done.artifact_id}`, {
        key: org.orgKey,
      });
      expect(read.body.artifact.content).toBe('# Offsite\n\nIt is in May.');
      expect(read.body.artifact.chat_history).toEqual([
        { role: 'user', content: 'Announce the offsite.' },
        {
          role: 'tool',
          content: expect.stringContaining('Offsites happen in May'),
          tool_name: 'knowledge_search',
          tool_call_id: 'search_1',
          parameters: { query: 'offsite month' },
          error: null,
        },
        { role: 'assistant', content: '# Offsite\n\nIt is in May.' },
      ]);
    } finally {
      t.deps.toolFamilies = toolFamilies;
    }
  });
});
