import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createArtifactType,
  createSkill,
  postStream as postStreamV1,
  useFakeModel,
} from './artifacts-fixtures.js';
import {
  type ChatTestApp,
  emptyChat,
  eventNames,
  orgWithModelAt,
  postStream,
  startChatApp,
  streamedText,
} from './chats-support.js';
import { call, createOrg, expectStatus, expectV1Error, expectV2Error, type TestOrg } from './helpers/app.js';
import { type FakeModelServer, startFakeModelServer } from './helpers/fake-model-server.js';

/** Issue 18, structured output: `response_format` on chats, against the fake model server and the built-in model. */
const schema = {
  type: 'object',
  properties: {
    title: { type: 'string', minLength: 1 },
    tags: { type: 'array', items: { type: 'string' }, minItems: 1 },
    score: { type: 'integer', minimum: 0, maximum: 10 },
  },
  required: ['title', 'tags', 'score'],
  additionalProperties: false,
};
const responseFormat = { type: 'json_schema', json_schema: { name: 'summary', schema } };

let server: FakeModelServer;
let t: ChatTestApp;
beforeAll(async () => {
  server = await startFakeModelServer();
  t = await startChatApp();
});
afterEach(() => server.reset());
afterAll(async () => {
  await t.close();
  await server.close();
});

const orgWithFakeModel = () => orgWithModelAt(t, server.baseUrl);

const newChat = (org: TestOrg) => emptyChat(t, org);

const send = (org: TestOrg, chatId: number, body: Record<string, unknown>) =>
  call(t, 'POST', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey, body });

const systemOf = (body: any): string =>
  body.messages
    .filter((m: any) => m.role === 'system')
    .map((m: any) => m.content)
    .join('\n');

describe('structured output (response_format)', () => {
  it('a valid reply: content is the JSON text, parsed the value; the provider is asked for JSON', async () => {
    const org = await orgWithFakeModel();
    const chatId = await newChat(org);
    const json = '{"title":"Tea","tags":["green"],"score":7}';
    server.enqueue({ text: json });
    const res = await send(org, chatId, { content: 'Summarise tea', response_format: responseFormat });
    expectStatus(res, 200);
    const { message } = res.body.response;
    expect(message.content).toBe(json);
    expect(message.parsed).toEqual({ title: 'Tea', tags: ['green'], score: 7 });
    expect(message.citations).toEqual([]);

    const [request] = server.chatRequests();
    // The openai-compatible provider's native JSON mode, and the schema as an instruction.
    expect(request.body.response_format).toEqual({ type: 'json_object' });
    expect(systemOf(request.body)).toContain(JSON.stringify(schema));

    const history = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey });
    const stored = history.body.response.messages.at(-1);
    expect(stored.parsed).toEqual({ title: 'Tea', tags: ['green'], score: 7 });
    expect(history.body.response.messages[0].parsed).toBeUndefined();

    // Without response_format nothing changes: no JSON mode, no parsed.
    server.enqueue({ text: 'plain words' });
    const plain = await send(org, chatId, { content: 'And now?' });
    expectStatus(plain, 200);
    expect(plain.body.response.message.parsed).toBeUndefined();
    expect(server.chatRequests()[1].body.response_format).toBeUndefined();
  });

  it('a reply in a code fence counts; streamed, the valid JSON is one content event', async () => {
    const org = await orgWithFakeModel();
    server.enqueue({ chunks: ['```json\n{"title":"A",', '"tags":["b"],"score":1}\n```'] });
    const res = await postStream(t.baseUrl, '/api/v2/chats', org.orgKey, {
      project_id: org.projectId,
      content: 'Give me JSON',
      stream: true,
      response_format: responseFormat,
    });
    expect(eventNames(res.events)).toEqual(['content', 'done']);
    const { message } = res.events[1].data;
    expect(streamedText(res.events)).toBe('{"title":"A",\n"tags":["b"],"score":1}'.replace('\n', ''));
    expect(message.content).toBe(streamedText(res.events));
    expect(message.parsed).toEqual({ title: 'A', tags: ['b'], score: 1 });
  });

  it('an invalid reply is repaired once, with the validation errors sent to the model', async () => {
    const org = await orgWithFakeModel();
    const chatId = await newChat(org);
    server.enqueue(
      { text: '{"title":"","tags":[],"score":42}' },
      { text: '{"title":"Fixed","tags":["x"],"score":10}' },
    );
    const res = await send(org, chatId, { content: 'Summarise', response_format: responseFormat });
    expectStatus(res, 200);
    expect(res.body.response.message.parsed).toEqual({ title: 'Fixed', tags: ['x'], score: 10 });
    const requests = server.chatRequests();
    expect(requests).toHaveLength(2);
    const repair = JSON.stringify(requests[1].body.messages);
    expect(repair).toContain('/score must be <= 10');
    expect(repair).toContain('/title must NOT have fewer than 1 characters');
    // The repair's tokens are counted with the reply's.
    const usage = res.body.response.message.usage;
    expect(usage.input_tokens).toBeGreaterThan(0);
  });

  it('a reply still invalid after the repair fails with 500 invalid_structured_output and the errors', async () => {
    const org = await orgWithFakeModel();
    const chatId = await newChat(org);
    server.enqueue({ text: 'Sure! Here it is.' }, { text: '{"title":"x","tags":["y"]}' });
    const res = await send(org, chatId, { content: 'Summarise', response_format: responseFormat });
    expectV2Error(res, 500, 'invalid_structured_output');
    expect(res.body.response.message).toContain("must have required property 'score'");

    server.enqueue({ text: 'nope' }, { text: 'still nope' });
    const streamed = await postStream(t.baseUrl, `/api/v2/chats/${chatId}/messages`, org.orgKey, {
      content: 'Again',
      stream: true,
      response_format: responseFormat,
    });
    expect(eventNames(streamed.events)).toEqual(['error']);
    expect(streamed.events[0].data.message).toContain('the reply is not JSON');
    expect(streamed.events[0].data.code).toBe(500);
  });

  it('an invalid schema, or a response_format without content, is 400 before anything runs', async () => {
    const org = await orgWithFakeModel();
    const chatId = await newChat(org);
    const bad = await send(org, chatId, {
      content: 'x',
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'bad', schema: { type: 'no-such-type' } },
      },
    });
    expectV2Error(bad, 400);
    expect(bad.body.response.message).toContain('not a valid JSON Schema');
    const noName = await send(org, chatId, {
      content: 'x',
      response_format: { type: 'json_schema', json_schema: { schema } },
    });
    expectV2Error(noName, 400);
    const wrongType = await send(org, chatId, { content: 'x', response_format: { type: 'text' } });
    expectV2Error(wrongType, 400);
    // The chat queue keeps text only: a structured message is not queued.
    const queued = await send(org, chatId, {
      content: 'x',
      response_format: responseFormat,
      if_busy: 'enqueue',
    });
    expectV2Error(queued, 400);
    expect(queued.body.response.message).toContain('if_busy');
    const withoutContent = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, response_format: responseFormat },
    });
    expectV2Error(withoutContent, 400);
    expect(server.chatRequests()).toHaveLength(0);
  });

  it('a schema may declare 2020-12, 2019-09 or draft-07 in $schema; an older draft is 400, not a 500', async () => {
    const org = await orgWithFakeModel();
    const chatId = await newChat(org);
    const declared = (uri: string, body: Record<string, unknown> = schema) => ({
      type: 'json_schema',
      json_schema: { name: 'summary', schema: { $schema: uri, ...body } },
    });
    const json = '{"title":"Tea","tags":["green"],"score":7}';
    for (const uri of [
      'http://json-schema.org/draft-07/schema#',
      'https://json-schema.org/draft-07/schema',
      'https://json-schema.org/draft/2019-09/schema',
      'https://json-schema.org/draft/2020-12/schema',
    ]) {
      server.enqueue({ text: json });
      const res = await send(org, chatId, { content: 'Summarise tea', response_format: declared(uri) });
      expectStatus(res, 200);
      expect(res.body.response.message.parsed).toEqual({ title: 'Tea', tags: ['green'], score: 7 });
    }
    // draft-07's tuple form is read as draft-07: a second item that is not an integer fails.
    const tuple = { type: 'array', items: [{ type: 'string' }, { type: 'integer' }], additionalItems: false };
    server.enqueue({ text: '["a","b"]' });
    server.enqueue({ text: '["a","b"]' });
    const invalid = await send(org, chatId, {
      content: 'A pair',
      response_format: declared('http://json-schema.org/draft-07/schema#', tuple),
    });
    expectV2Error(invalid, 500, 'invalid_structured_output');
    const requests = server.chatRequests().length;
    for (const uri of ['http://json-schema.org/draft-04/schema#', 'https://example.com/my-meta', 7]) {
      const res = await send(org, chatId, { content: 'x', response_format: declared(uri as string) });
      expectV2Error(res, 400);
      expect(res.body.response.message).toContain('is not supported');
    }
    expect(server.chatRequests()).toHaveLength(requests);
  });

  it('a provider that fails (the AI SDK path) is a 500 for the turn, and the process lives on', async () => {
    const org = await orgWithFakeModel();
    const chatId = await newChat(org);
    // 500 on every attempt: the bounded retries give up, the turn fails.
    for (let i = 0; i < 5; i++) server.enqueue({ status: 500, errorBody: { error: { message: 'down' } } });
    const failed = await send(org, chatId, { content: 'Summarise tea', response_format: responseFormat });
    expectV2Error(failed, 500);
    server.reset();
    // Same process, next turn: it still answers.
    server.enqueue({ text: '{"title":"Tea","tags":["green"],"score":7}' });
    const next = await send(org, chatId, { content: 'Again', response_format: responseFormat });
    expectStatus(next, 200);
  });

  it('the built-in offline model answers with a value of the schema', async () => {
    const org = await createOrg(t);
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: { project_id: org.projectId, content: 'Describe tea', response_format: responseFormat },
    });
    expectStatus(res, 201);
    const { message } = res.body.response;
    expect(message.parsed).toEqual({ title: expect.any(String), tags: [expect.any(String)], score: 0 });
    expect(JSON.parse(message.content)).toEqual(message.parsed);
  });
});

describe('structured output on artifact generation (v1)', () => {
  async function artifactSetup() {
    const org = await createOrg(t);
    await useFakeModel(t, org, server);
    const type = await createArtifactType(t, org, `brief-${Math.random().toString(36).slice(2, 6)}`);
    const skill = await createSkill(t, org, { name: 'Brief', content: 'Write a brief', typeIds: [type.id] });
    const path = `/api/v1/artifact_types/${type.slug}/artifacts?project_id=${org.projectId}`;
    const streamPath = `/api/v1/artifact_types/${type.slug}/artifacts/stream?project_id=${org.projectId}`;
    return { org, skill, path, streamPath };
  }

  it('blocking: content is the JSON, parsed the value (kept on read, dropped by an edit)', async () => {
    const { org, skill, path } = await artifactSetup();
    server.enqueue({ text: '{"title":"Brief","tags":["a"],"score":3}' });
    const res = await call(t, 'POST', path, {
      key: org.orgKey,
      body: { skill_id: skill.id, inputs: [], name: 'B', response_format: responseFormat },
    });
    expectStatus(res, 201);
    expect(res.body.artifact.content).toBe('{"title":"Brief","tags":["a"],"score":3}');
    expect(res.body.artifact.parsed).toEqual({ title: 'Brief', tags: ['a'], score: 3 });
    expect(systemOf(server.chatRequests()[0].body)).toContain(JSON.stringify(schema));
    const id = res.body.artifact.id;
    const slug = res.body.artifact.artifact_type_slug;
    const read = await call(t, 'GET', `/api/v1/artifact_types/${slug}/artifacts/${id}`, { key: org.orgKey });
    expect(read.body.artifact.parsed).toEqual({ title: 'Brief', tags: ['a'], score: 3 });
    const edited = await call(t, 'PUT', `/api/v1/artifact_types/${slug}/artifacts/${id}`, {
      key: org.orgKey,
      body: { content: 'prose now' },
    });
    expectStatus(edited, 200);
    expect(edited.body.artifact.parsed).toBeUndefined();
  });

  it('stream: repaired once, sent as one chunk; still invalid: 500 with the errors in details', async () => {
    const { org, skill, path, streamPath } = await artifactSetup();
    server.enqueue({ text: '{"title":"x"}' }, { text: '{"title":"x","tags":["t"],"score":2}' });
    const streamed = await postStreamV1(t, streamPath, org.orgKey, {
      skill_id: skill.id,
      inputs: [],
      response_format: responseFormat,
    });
    expect(streamed.events.map((e) => e.event)).toEqual(['chunk', 'done']);
    expect(streamed.data[0].content).toBe('{"title":"x","tags":["t"],"score":2}');
    expect(server.chatRequests()).toHaveLength(2);

    server.enqueue({ text: 'no' }, { text: '{"title":"x"}' });
    const failed = await call(t, 'POST', path, {
      key: org.orgKey,
      body: { skill_id: skill.id, inputs: [], response_format: responseFormat },
    });
    expectV1Error(failed, 500, 'invalid_structured_output');
    expect(failed.body.error.details.response_format).toEqual(
      expect.arrayContaining(["/ must have required property 'tags'"]),
    );

    const badSchema = await call(t, 'POST', path, {
      key: org.orgKey,
      body: {
        skill_id: skill.id,
        inputs: [],
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { minLength: -1 } } },
      },
    });
    expectV1Error(badSchema, 400);
  });
});
