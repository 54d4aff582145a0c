import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chatMessages, documentGroups, documents } from '../src/db/schema/index.js';
import {
  addModel,
  type ChatTestApp,
  emptyChat,
  eventNames,
  orgWithModelAt,
  postStream,
  startChatApp,
} from './chats-support.js';
import { createGroup, uploadFile, waitForProcessing } from './fixtures/knowledge-helpers.js';
import { call, createOrg, expectStatus, expectV2Error, type TestOrg } from './helpers/app.js';
import {
  type FakeModelServer,
  startFakeAnthropicServer,
  startFakeModelServer,
} from './helpers/fake-model-server.js';

/** Uploads and waits for processing (extraction runs in a child process: slow on a loaded machine). */
async function uploadAndProcess(
  t: Parameters<typeof uploadFile>[0],
  key: string,
  filename: string,
  content: string,
  groups?: number[],
) {
  const document = await uploadFile(t, key, filename, content, groups);
  return waitForProcessing(t, key, document.id, 80_000);
}

/** Issue 18, attachments: documents and images sent with a message, over real HTTP to the fake model. */

/** A real 1×1 PNG. */
const PNG_BASE64 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';
const PNG_URL = `data:image/png;base64,${PNG_BASE64}`;
/** A 3×2 GIF (one white pixel stretched by the header's size). */
const GIF = Buffer.from(
  '474946383961030002008000000000ffffff21f90401000000002c00000000030002000002028c0b003b',
  'hex',
);
const GIF_URL = `data:image/gif;base64,${GIF.toString('base64')}`;

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

const history = async (org: TestOrg, chatId: number) => {
  const res = await call(t, 'GET', `/api/v2/chats/${chatId}/messages`, { key: org.orgKey });
  expectStatus(res, 200);
  return res.body.response.messages as any[];
};

const userMessagesSent = (body: any) => body.messages.filter((m: any) => m.role === 'user');

// Several tests upload and process documents: slow on a loaded machine.
describe('attachments', { timeout: 90_000 }, () => {
  it("a document's text and an image part reach the model; history shows them without bytes", async () => {
    const org = await orgWithFakeModel();
    const doc = await uploadAndProcess(
      t,
      org.orgKey,
      'notes.md',
      '# Notes\n\nThe cobalt kettle whistles at dawn.',
    );
    const chatId = await newChat(org);
    server.enqueue({ text: 'Seen both.' }, { text: 'Still here.' });
    const res = await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: {
        content: 'Read these',
        attachments: [
          { type: 'document', document_id: doc.id },
          { type: 'image', data_url: PNG_URL },
        ],
      },
    });
    expectStatus(res, 200);
    const [sent] = userMessagesSent(server.chatRequests()[0].body);
    expect(sent.content).toEqual([
      { type: 'text', text: 'Read these' },
      { type: 'text', text: expect.stringContaining('The cobalt kettle whistles at dawn.') },
      { type: 'image_url', image_url: { url: PNG_URL } },
    ]);
    expect(sent.content[1].text).toMatch(/^<attached_document name="notes.md" document_id="\d+">/);

    const messages = await history(org, chatId);
    expect(messages[0].attachments).toEqual([
      {
        id: expect.any(Number),
        type: 'document',
        document_id: doc.id,
        name: 'notes.md',
        media_type: 'text/markdown',
        size_bytes: expect.any(Number),
      },
      { id: expect.any(Number), type: 'image', media_type: 'image/png', size_bytes: 70 },
    ]);
    expect(messages[1].attachments).toEqual([]);
    expect(JSON.stringify(messages)).not.toContain(PNG_BASE64.slice(0, 20));

    // The image is served to the owning key only; a document attachment has no bytes here.
    const imageId = messages[0].attachments[1].id;
    const image = await call(t, 'GET', `/api/v2/chats/${chatId}/attachments/${imageId}`, { key: org.orgKey });
    expectStatus(image, 200);
    expect(image.headers['content-type']).toBe('image/png');
    expect(image.raw.rawPayload.equals(Buffer.from(PNG_BASE64, 'base64'))).toBe(true);
    expectV2Error(
      await call(t, 'GET', `/api/v2/chats/${chatId}/attachments/${imageId}`, { key: org.adminKey }),
      404,
    );
    expectV2Error(
      await call(t, 'GET', `/api/v2/chats/${chatId}/attachments/${messages[0].attachments[0].id}`, {
        key: org.orgKey,
      }),
      404,
    );
    const otherChat = await newChat(org);
    expectV2Error(
      await call(t, 'GET', `/api/v2/chats/${otherChat}/attachments/${imageId}`, { key: org.orgKey }),
      404,
    );

    // The next turn still gives the model the earlier message's attachments.
    await call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
      key: org.orgKey,
      body: { content: 'And now?' },
    });
    const again = userMessagesSent(server.chatRequests()[1].body);
    expect(again[0].content).toHaveLength(3);
    expect(again[1].content).toBe('And now?');
  });

  it('on create (streamed), and a long document is cut with the cut marked', async () => {
    const org = await orgWithFakeModel();
    const long = Array.from({ length: 6000 }, (_, i) => `Sentence ${i} about ledgers.`).join(' ');
    const doc = await uploadAndProcess(t, org.orgKey, 'long.txt', long);
    expect(doc.processing_status).toBe('completed');
    server.enqueue({ text: 'ok' });
    const res = await postStream(t.baseUrl, '/api/v2/chats', org.orgKey, {
      project_id: org.projectId,
      content: 'Summarise',
      stream: true,
      attachments: [{ type: 'document', document_id: doc.id }],
    });
    expect(eventNames(res.events).at(-1)).toBe('done');
    const [sent] = userMessagesSent(server.chatRequests()[0].body);
    const text = sent.content[1].text as string;
    expect(text).toContain('Sentence 0 about ledgers.');
    expect(text).toMatch(/\[… the document is cut here: about \d+ more tokens not shown …\]/);
    expect(text).not.toContain('Sentence 5999 about');
    expect(text.length).toBeLessThan(33_000);
  });

  it('refuses invisible and unprocessed documents, and bad or oversized images, before anything is written', async () => {
    const org = await orgWithFakeModel();
    const other = await createOrg(t);
    const foreign = await uploadAndProcess(t, other.orgKey, 'foreign.md', 'Not yours.');
    const [queued] = await t.deps.database.db
      .insert(documents)
      .values({
        organizationId: org.organizationId,
        name: 'pending.md',
        mediaType: 'text/markdown',
        sizeBytes: 5,
        sha256: 'x'.repeat(64),
        processingStatus: 'queued',
      })
      .returning();
    await t.deps.database.db
      .insert(documentGroups)
      .values({ documentId: queued.id, groupId: org.defaultGroupId });
    const chatId = await newChat(org);
    const send = (attachments: unknown[]) =>
      call(t, 'POST', `/api/v2/chats/${chatId}/messages`, {
        key: org.orgKey,
        body: { content: 'Look', attachments },
      });

    const invisible = await send([{ type: 'document', document_id: foreign.id }]);
    expectV2Error(invisible, 400, 'attachment_not_visible');
    expect(invisible.body.response.message).toContain(`Document ${foreign.id} is not visible`);
    // Same organization, but in a group the project does not share.
    const elsewhere = await createGroup(t, org, 'Elsewhere');
    const outside = await uploadAndProcess(t, org.orgKey, 'outside.md', 'Another group.', [elsewhere]);
    expectV2Error(await send([{ type: 'document', document_id: outside.id }]), 400, 'attachment_not_visible');
    const unprocessed = await send([{ type: 'document', document_id: queued.id }]);
    expectV2Error(unprocessed, 400, 'attachment_not_processed');
    expect(unprocessed.body.response.message).toContain('not processed (queued)');

    const big = Buffer.alloc(5 * 1024 * 1024 + 1);
    GIF.copy(big);
    const oversized = await send([
      { type: 'image', data_url: `data:image/gif;base64,${big.toString('base64')}` },
    ]);
    expectV2Error(oversized, 400);
    for (const dataUrl of [
      'data:image/png;base64,!!!',
      'data:text/plain;base64,aGVsbG8=',
      'https://example.com/cat.png',
      `data:image/png;base64,${GIF.toString('base64')}`,
      'data:image/jpeg;base64,aGVsbG8=',
    ]) {
      const res = await send([{ type: 'image', data_url: dataUrl }]);
      expectV2Error(res, 400);
    }
    const tooMany = await send(Array.from({ length: 11 }, () => ({ type: 'image', data_url: PNG_URL })));
    expectV2Error(tooMany, 400);
    expectV2Error(await send([{ type: 'video', data_url: PNG_URL }]), 400);

    // On create, a refused attachment creates no chat.
    const before = await call(t, 'GET', '/api/v2/chats', { key: org.orgKey });
    const refusedCreate = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: {
        project_id: org.projectId,
        content: 'x',
        attachments: [{ type: 'document', document_id: queued.id }],
      },
    });
    expectV2Error(refusedCreate, 400, 'attachment_not_processed');
    const after = await call(t, 'GET', '/api/v2/chats', { key: org.orgKey });
    expect(after.body.response.pagination).toEqual(before.body.response.pagination);

    expect(server.chatRequests()).toHaveLength(0);
    expect(await history(org, chatId)).toEqual([]);
    const rows = await t.deps.database.db.select().from(chatMessages);
    expect(rows.filter((m) => m.chatId === chatId)).toEqual([]);
  });

  it('a fork copies the attachments, and the built-in model describes an image', async () => {
    const org = await createOrg(t);
    const created = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: {
        project_id: org.projectId,
        content: 'What is this?',
        attachments: [{ type: 'image', data_url: GIF_URL }],
      },
    });
    expectStatus(created, 201);
    const { chat, message } = created.body.response;
    expect(message.content).toContain(`an image: GIF, 3×2 pixels (${GIF.length} bytes)`);

    const [question] = await history(org, chat.id);
    const fork = await call(t, 'POST', `/api/v2/chats/${chat.id}/fork`, {
      key: org.orgKey,
      body: { message_id: question.id },
    });
    expectStatus(fork, 201);
    const forkId = fork.body.response.chat.id;
    const [copied] = await history(org, forkId);
    expect(copied.attachments).toEqual([{ ...question.attachments[0], id: expect.any(Number) }]);
    expect(copied.attachments[0].id).not.toBe(question.attachments[0].id);
    const image = await call(t, 'GET', `/api/v2/chats/${forkId}/attachments/${copied.attachments[0].id}`, {
      key: org.orgKey,
    });
    expectStatus(image, 200);
    expect(image.raw.rawPayload.equals(GIF)).toBe(true);
  });
});

describe('attachments through the Anthropic Messages API', () => {
  let anthropic: FakeModelServer;
  beforeAll(async () => {
    anthropic = await startFakeAnthropicServer();
  });
  afterAll(() => anthropic.close());

  it('the image reaches the model as a base64 image block, the document as text', async () => {
    const org = await createOrg(t);
    await addModel(t, org.organizationId, {
      baseUrl: anthropic.baseUrl,
      provider: 'anthropic',
      model: 'claude-fake',
      makeDefault: true,
    });
    anthropic.enqueue({ text: 'A tiny picture.' });
    const res = await call(t, 'POST', '/api/v2/chats', {
      key: org.orgKey,
      body: {
        project_id: org.projectId,
        content: 'What is it?',
        attachments: [{ type: 'image', data_url: PNG_URL }],
      },
    });
    expectStatus(res, 201);
    const [request] = anthropic.chatRequests();
    const user = request.body.messages.find((m: any) => m.role === 'user');
    expect(user.content).toEqual([
      expect.objectContaining({ type: 'text', text: 'What is it?' }),
      expect.objectContaining({
        type: 'image',
        source: { type: 'base64', media_type: 'image/png', data: PNG_BASE64 },
      }),
    ]);
  });
});
