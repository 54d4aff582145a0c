import SwaggerParser from '@apidevtools/swagger-parser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, call, expectStatus, type TestApp } from './helpers/app.js';

// Issue 16, items 5-9: a document that generates clean clients (spectral runs in `npm run lint`).
describe('the OpenAPI document', () => {
  let t: TestApp;
  let doc: any;
  const operations: { path: string; method: string; op: any }[] = [];

  beforeAll(async () => {
    t = await buildTestApp({ PUBLIC_BASE_URL: 'https://scriptorium.example.org' });
    const res = await call(t, 'GET', '/openapi.json');
    expectStatus(res, 200);
    doc = res.body;
    for (const [path, item] of Object.entries<any>(doc.paths)) {
      for (const method of ['get', 'post', 'put', 'delete', 'patch']) {
        if (item[method]) operations.push({ path, method, op: item[method] });
      }
    }
  });
  afterAll(() => t.close());

  it('is valid OpenAPI 3.1 with a server, and every $ref resolves', async () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.servers).toEqual([
      { url: 'https://scriptorium.example.org', description: expect.any(String) },
    ]);
    await SwaggerParser.validate(structuredClone(doc));
  });

  it('gives every operation a unique operationId, declared tags, a summary and a description', () => {
    const declared = doc.tags.map((tag: any) => tag.name);
    expect(declared[0]).toBe('Chats');
    const ids = operations.map(({ op }) => op.operationId);
    expect(ids.every((id) => typeof id === 'string' && /^[a-z][A-Za-z]+$/.test(id))).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    for (const { path, method, op } of operations) {
      const where = `${method.toUpperCase()} ${path}`;
      expect(op.tags?.length, where).toBe(1);
      expect(declared, where).toContain(op.tags[0]);
      expect(op.summary, where).toEqual(expect.any(String));
      expect(op.description?.length, where).toBeGreaterThan(10);
      for (const [status, response] of Object.entries<any>(op.responses)) {
        expect(response.description, `${where} ${status}`).not.toBe('Default Response');
      }
    }
    // Chat endpoints come first.
    expect(Object.keys(doc.paths)[0]).toBe('/api/v2/chats');
    expect(ids).toEqual(expect.arrayContaining(['createChat', 'sendMessage', 'streamChat', 'listProjects']));
  });

  it('names shared schemas in components and references them', () => {
    const names = Object.keys(doc.components.schemas);
    for (const name of [
      'Chat',
      'Message',
      'ToolExecution',
      'Pagination',
      'Artifact',
      'Document',
      'Project',
      'V1Error',
      'V2Error',
      'ChatCreatedResponse',
      'ProjectListResponse',
    ]) {
      expect(names, name).toContain(name);
    }
    const createChat = doc.paths['/api/v2/chats'].post;
    expect(createChat.responses['201'].content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/ChatCreatedResponse',
    });
    expect(doc.components.schemas.Message.properties.tool_executions.items).toEqual({
      $ref: '#/components/schemas/ToolExecution',
    });
    // Nothing named is left inline: every titled schema became a reference.
    const inline: string[] = [];
    const walk = (node: any, at: string) => {
      if (!node || typeof node !== 'object') return;
      if (typeof node.title === 'string') inline.push(`${at}: ${node.title}`);
      for (const [key, value] of Object.entries(node)) if (key !== 'parameters') walk(value, `${at}/${key}`);
    };
    walk(doc.paths, '');
    expect(inline).toEqual([]);
    expect(JSON.stringify(doc).length).toBeLessThan(250_000);
  });

  it('marks parameters with a default as optional', () => {
    let checked = 0;
    for (const { path, method, op } of operations) {
      for (const parameter of op.parameters ?? []) {
        if (parameter.$ref || parameter.schema?.default === undefined) continue;
        checked++;
        expect(parameter.required, `${method} ${path} ${parameter.name}`).not.toBe(true);
      }
    }
    expect(checked).toBeGreaterThan(30);
    const list = doc.paths['/api/v1/projects'].get.parameters;
    expect(list.find((p: any) => p.name === 'page')).toMatchObject({
      required: false,
      schema: { default: 1 },
    });
  });

  it('declares Idempotency-Key on POSTs and Last-Event-ID where a stream resumes', () => {
    const refs = (op: any) => (op.parameters ?? []).map((p: any) => p.$ref).filter(Boolean);
    for (const { path, method, op } of operations) {
      if (method === 'post' && path.startsWith('/api/')) {
        expect(refs(op), path).toContain('#/components/parameters/IdempotencyKey');
      }
    }
    expect(doc.components.parameters.IdempotencyKey).toMatchObject({ name: 'Idempotency-Key', in: 'header' });
    expect(doc.components.parameters.LastEventId).toMatchObject({ name: 'Last-Event-ID', in: 'header' });
    expect(refs(doc.paths['/api/v2/chats/{id}/stream'].get)).toContain('#/components/parameters/LastEventId');
  });

  it('declares the streamed answers as text/event-stream, and create-chat as 200 (streamed) and 201', () => {
    const createChat = doc.paths['/api/v2/chats'].post.responses;
    expect(Object.keys(createChat['200'].content)).toEqual(['text/event-stream']);
    expect(Object.keys(createChat['201'].content)).toEqual(['application/json']);
    const send = doc.paths['/api/v2/chats/{id}/messages'].post.responses['200'].content;
    expect(Object.keys(send).sort()).toEqual(['application/json', 'text/event-stream']);
    expect(doc.paths['/api/v2/chats/{id}/stream'].get.responses['200'].content).toHaveProperty(
      'text/event-stream',
    );
    for (const path of [
      '/api/v1/artifact_types/{artifact_type_slug}/artifacts/stream',
      '/api/v1/artifact_types/{artifact_type_slug}/artifacts/{artifact_id}/refine_stream',
    ]) {
      const responses = doc.paths[path].post.responses;
      const streamed = Object.values<any>(responses).some((r) => r.content?.['text/event-stream']);
      expect(streamed, path).toBe(true);
    }
  });

  it('needs no key for /health and /ready; every /api operation does', () => {
    expect(doc.paths['/health'].get.security).toEqual([]);
    expect(doc.paths['/ready'].get.security).toEqual([]);
    expect(doc.security).toEqual([{ bearer: [] }]);
    for (const { path, op } of operations) {
      if (path.startsWith('/api/')) expect(op.security, path).toBeUndefined();
    }
  });

  it("serves the reference page under the service's name, offline", async () => {
    const page = await call(t, 'GET', '/docs/');
    expectStatus(page, 200);
    expect(String(page.body)).toContain('<title>Scriptorium API</title>');
    expect(String(page.body)).not.toMatch(/https?:\/\/(?!127\.0\.0\.1)[^"']*\.(js|css)/);
    const init = await call(t, 'GET', '/docs/static/swagger-initializer.js');
    expectStatus(init, 200);
    expect(String(init.body)).toContain('data:image/svg+xml;base64,');
  });
});
