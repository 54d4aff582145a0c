import multipart from '@fastify/multipart';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { contextOf } from '../../http/context.js';
import { claimIdempotencyAfterBody } from '../../http/idempotency.js';
import { pagination } from '../../http/pagination.js';
import { IdParams, Message, V1Error, v1Responses } from '../../http/schemas.js';
import { presentDocument, presentDocumentDetail } from './presenter.js';
import {
  DocumentListQuery,
  DocumentListResponse,
  DocumentResponse,
  UploadBody,
  UploadResponse,
} from './schemas.js';
import { deleteDocument, getDocument, listDocuments, uploadDocument } from './service.js';
import { readUploadForm, uploadDigest } from './upload-form.js';

const tags = ['Documents'];

export const documentRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { config, jobs } = app.deps;
  await app.register(multipart, {
    limits: {
      // One byte over the limit is enough to know the file is too large.
      fileSize: config.uploadMaxBytes + 1,
      files: 5,
      fields: 100,
      fieldSize: 64 * 1024,
      parts: 110,
    },
  });
  // Any other body type reaches the handler, which explains the expected form (400), instead of a 415.
  app.addContentTypeParser('*', (_request, _payload, done) => done(null, undefined));

  app.post(
    '/data_center/documents',
    {
      schema: {
        operationId: 'uploadDocument',
        description:
          'Stores the file (PDF, DOCX, HTML, Markdown, CSV or plain text) for a project and queues its text extraction and indexing: `queued`, then `processing`, then `completed` or `failed`.',
        tags,
        summary: 'Upload a document (multipart/form-data)',
        consumes: ['multipart/form-data'],
        // Documented for /openapi.json; the route validates the multipart form itself.
        body: UploadBody,
        response: v1Responses({ 201: UploadResponse, 413: V1Error }),
      },
      validatorCompiler: () => () => true,
    },
    async (request, reply) => {
      const ctx = contextOf(request);
      const input = await readUploadForm(request, config.uploadMaxBytes);
      if (await claimIdempotencyAfterBody(request, reply, uploadDigest(input))) return reply;
      const { row, groupIds } = await uploadDocument(ctx, jobs, input);
      reply.status(201);
      return { document: presentDocument(row, groupIds) };
    },
  );

  app.get(
    '/data_center/documents',
    {
      schema: {
        operationId: 'listDocuments',
        summary: 'List documents',
        description:
          'Documents of the projects the calling key may use, optionally of one project. Paginated.',
        tags,
        querystring: DocumentListQuery,
        response: v1Responses({ 200: DocumentListResponse }),
      },
    },
    async (request) => {
      const { rows, total } = await listDocuments(contextOf(request), request.query);
      return {
        documents: rows.map((d) => presentDocumentDetail(d.row, d.groupIds, d.chunkCount)),
        pagination: pagination(request.query, total),
      };
    },
  );

  app.get(
    '/data_center/documents/:id',
    {
      schema: {
        operationId: 'getDocument',
        summary: 'Get a document',
        description: 'One document with its processing status.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: DocumentResponse }),
      },
    },
    async (request) => {
      const d = await getDocument(contextOf(request), request.params.id);
      return { document: presentDocumentDetail(d.row, d.groupIds, d.chunkCount) };
    },
  );

  app.delete(
    '/data_center/documents/:id',
    {
      schema: {
        operationId: 'deleteDocument',
        summary: 'Delete a document',
        description: 'Deletes the document and its indexed chunks; chats no longer find it.',
        tags,
        params: IdParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      await deleteDocument(contextOf(request), request.params.id);
      return { message: 'Document deleted' };
    },
  );
};
