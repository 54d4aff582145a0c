import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { contextOf } from '../../http/context.js';
import { ApiError, badRequest, toApiError, unprocessable } from '../../http/errors.js';
import { setIdempotentStream } from '../../http/idempotency.js';
import { Message, V1Error, v1Responses } from '../../http/schemas.js';
import { SseStream } from '../../http/sse.js';
import {
  type ArtifactEvent,
  ArtifactStreamEvents,
  artifactDone,
  artifactError,
  eventList,
} from '../../streams/protocol.js';
import { StreamPublisher } from '../../streams/publisher.js';
import { relayStream } from '../../streams/sse-relay.js';
import type { StreamHub } from '../../streams/stream-hub.js';
import { requestArrival, TurnTiming } from '../../telemetry/turn-timing.js';
import { AsyncAcceptedResponse } from '../async-requests/schemas.js';
import { acceptGeneration, acceptRefinement } from '../async-requests/service.js';
import {
  type ArtifactResult,
  type GenerateArtifactInput,
  prepareGeneration,
  prepareRefinement,
  type RefineArtifactInput,
  runGeneration,
  runRefinement,
} from './generation.js';
import { presentArtifact, presentUsage } from './presenter.js';
import {
  ArtifactParams,
  ArtifactResponse,
  ArtifactTypeParams,
  ArtifactWithUrlResponse,
  GenerateBody,
  ProjectQuery,
  RefineBody,
  type StreamGenerateBody,
  StreamGenerateBody as StreamGenerateBodySchema,
  StreamRefineBody,
  UpdateArtifactBody,
} from './schemas.js';
import { deleteArtifact, getArtifact, updateArtifact } from './service.js';

const tags = ['Artifacts'];
const streamResponse = {
  200: {
    description: `text/event-stream with the events ${eventList(ArtifactStreamEvents)}: \`chunk\` {content, done: false} events, then \`done\` {artifact_id, done: true}; a failure after the stream opened is an \`error\` event with the v1 error object. Every event has an \`id:\` line (its sequence number); a repeat of the request with the same \`Idempotency-Key\` and body reattaches to the same stream from its start instead of generating again.`,
    content: { 'text/event-stream': { schema: { type: 'string' } } },
  },
};

/** `skill_id`, or the deprecated `prompt_template_id` in its place (spec 9). */
function skillIdOf(body: StreamGenerateBody): number {
  const { skill_id: skillId, prompt_template_id: templateId } = body;
  if (skillId !== undefined && templateId !== undefined && skillId !== templateId) {
    throw unprocessable('skill_id and prompt_template_id name different skills', {
      prompt_template_id: ['differs from skill_id; send only skill_id'],
    });
  }
  const id = skillId ?? templateId;
  if (id === undefined) throw unprocessable('skill_id is required', { skill_id: ['is required'] });
  return id;
}

function generateInput(
  params: ArtifactTypeParams,
  query: ProjectQuery,
  body: StreamGenerateBody,
): GenerateArtifactInput {
  return {
    artifactTypeSlug: params.artifact_type_slug,
    projectId: query.project_id,
    skillId: skillIdOf(body),
    inputs: body.inputs,
    name: body.name ?? null,
    modelConfigurationId: body.model_configuration_id ?? null,
    ...(body.response_format ? { responseFormat: body.response_format } : {}),
  };
}

/** Spec 7.2 names 400 for a missing refine prompt, so the route checks it rather than the schema (422). */
function refineInput(params: ArtifactParams, body: RefineBody): RefineArtifactInput {
  if (body.refine_prompt === undefined || body.refine_prompt.trim() === '') {
    throw badRequest('refine_prompt is required and must not be empty', { refine_prompt: ['is required'] });
  }
  return {
    artifactTypeSlug: params.artifact_type_slug,
    artifactId: params.artifact_id,
    refinePrompt: body.refine_prompt,
    modelConfigurationId: body.model_configuration_id ?? null,
  };
}

/**
 * Runs accepted work behind an event stream. Everything checkable was checked before the stream
 * opened (those failures are HTTP statuses); from here a failure is an `error` event, and since an
 * artifact is only written once the model finished, nothing half-written is saved.
 *
 * Events go through the stream hub (stored under `artifact-stream:<uuid>`, each with its `seq` as
 * the SSE `id:`), so a repeat of the request with the same Idempotency-Key reattaches to them.
 */
async function streamWork(
  request: FastifyRequest,
  reply: FastifyReply,
  hub: StreamHub,
  work: (onChunk: (text: string) => void) => Promise<ArtifactResult>,
) {
  const publisher = new StreamPublisher<ArtifactEvent>(hub, `artifact-stream:${randomUUID()}`);
  const { key } = publisher;
  const relayed = relayStream(new SseStream(reply), (listener) => hub.subscribe(key, 0, listener), {
    lostEvent,
  });
  const recorded = setIdempotentStream(request, key).catch((err) =>
    request.log.error({ err }, 'could not record the stream of an idempotent request'),
  );
  try {
    const result = await work((content) => {
      void publisher.publish({ name: 'chunk', data: { content, done: false } });
    });
    await publisher.publish(artifactDone(result.artifact.id));
  } catch (error) {
    const apiError = toApiError('v1', error);
    if (apiError.status >= 500) request.log.error({ err: error }, 'artifact stream failed');
    await publisher.publish(artifactError(apiError));
  }
  await relayed;
  await recorded;
}

/** The `error` event of a stream whose process stopped before its end. */
const lostEvent = () =>
  artifactError(
    new ApiError(500, 'stream_interrupted', 'The generation was interrupted: the server running it stopped'),
  );

/**
 * A repeat of a streaming request (same Idempotency-Key and body): its first stream again, from
 * the start or after the repeat's Last-Event-ID.
 */
function reattach(reply: FastifyReply, hub: StreamHub, key: string, after: number) {
  return relayStream(new SseStream(reply), (listener) => hub.subscribe(key, after, listener), {
    lostEvent,
    afterSeq: after,
  });
}

export const artifactRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { deps } = app;
  const hub = deps.streams;
  const present = (result: ArtifactResult) => {
    const artifact = presentArtifact(app.deps.config, result.artifact);
    return { artifact, url: artifact.url, usage: presentUsage(result.usage) };
  };

  app.post(
    '/artifact_types/:artifact_type_slug/artifacts',
    {
      schema: {
        operationId: 'generateArtifact',
        description:
          "Runs a skill of the artifact type and answers with the stored artifact (201). With `fire_and_forget: true` it answers 200 at once with an `api_async_create_event_id`; the result is sent to the project's webhooks.",
        tags,
        summary: 'Generate an artifact (blocking)',
        params: ArtifactTypeParams,
        querystring: ProjectQuery,
        body: GenerateBody,
        response: v1Responses({
          201: ArtifactWithUrlResponse,
          200: AsyncAcceptedResponse,
          402: V1Error,
          500: V1Error,
        }),
      },
    },
    async (request, reply) => {
      const ctx = contextOf(request);
      const input = generateInput(request.params, request.query, request.body);
      // Fire-and-forget (spec 4.2): the same checks, then the request and its job are stored; 200.
      if (request.body.fire_and_forget === true) return acceptGeneration(ctx, app.deps.jobs, input);
      const timing = new TurnTiming(requestArrival(reply));
      // Its checks are database reads.
      const prepared = await timing.db(prepareGeneration(ctx, input));
      const result = await runGeneration(ctx, prepared, {
        families: deps.toolFamilies,
        deadlineMs: deps.config.replyTimeoutMs,
        timing,
      });
      timing.ended();
      reply.header('server-timing', timing.serverTiming());
      reply.status(201);
      return present(result);
    },
  );

  app.post(
    '/artifact_types/:artifact_type_slug/artifacts/stream',
    {
      schema: {
        operationId: 'streamArtifactGeneration',
        description:
          'Like the blocking generation, answered as `text/event-stream`: `content` events carry the text as it is written, then `done` carries the stored artifact, or `error` ends the stream.',
        tags,
        summary: 'Generate an artifact (Server-Sent Events)',
        params: ArtifactTypeParams,
        querystring: ProjectQuery,
        body: StreamGenerateBodySchema,
        response: { ...v1Responses({ 402: V1Error, 500: V1Error }), ...streamResponse },
      },
    },
    async (request, reply) => {
      const ctx = contextOf(request);
      if (request.idempotencyStream)
        return reattach(reply, hub, request.idempotencyStream, request.idempotencyStreamAfter);
      const prepared = await prepareGeneration(
        ctx,
        generateInput(request.params, request.query, request.body),
      );
      // A client that leaves does not stop the work: the artifact is saved and `artifact_generated` recorded.
      await streamWork(request, reply, hub, (onChunk) =>
        runGeneration(ctx, prepared, { onChunk, families: deps.toolFamilies }),
      );
    },
  );

  app.post(
    '/artifact_types/:artifact_type_slug/artifacts/:artifact_id/refine',
    {
      schema: {
        operationId: 'refineArtifact',
        description:
          'Rewrites an artifact following the instructions and stores the result as a new artifact (200). With `fire_and_forget: true` it answers at once; the result is sent to webhooks.',
        tags,
        summary: 'Refine an artifact (blocking)',
        params: ArtifactParams,
        body: RefineBody,
        response: v1Responses({
          200: Type.Union([ArtifactWithUrlResponse, AsyncAcceptedResponse]),
          402: V1Error,
          500: V1Error,
        }),
      },
    },
    async (request, reply) => {
      const ctx = contextOf(request);
      const input = refineInput(request.params, request.body);
      if (request.body.fire_and_forget === true) return acceptRefinement(ctx, app.deps.jobs, input);
      const timing = new TurnTiming(requestArrival(reply));
      const prepared = await timing.db(prepareRefinement(ctx, input));
      const result = await runRefinement(ctx, prepared, {
        families: deps.toolFamilies,
        deadlineMs: deps.config.replyTimeoutMs,
        timing,
      });
      timing.ended();
      reply.header('server-timing', timing.serverTiming());
      return present(result);
    },
  );

  app.post(
    '/artifact_types/:artifact_type_slug/artifacts/:artifact_id/refine_stream',
    {
      schema: {
        operationId: 'streamArtifactRefinement',
        description:
          'Like the blocking refinement, answered as `text/event-stream` (`content`, then `done` or `error`).',
        tags,
        summary: 'Refine an artifact (Server-Sent Events)',
        params: ArtifactParams,
        body: StreamRefineBody,
        response: { ...v1Responses({ 402: V1Error, 500: V1Error }), ...streamResponse },
      },
    },
    async (request, reply) => {
      const ctx = contextOf(request);
      if (request.idempotencyStream)
        return reattach(reply, hub, request.idempotencyStream, request.idempotencyStreamAfter);
      const prepared = await prepareRefinement(ctx, refineInput(request.params, request.body));
      await streamWork(request, reply, hub, (onChunk) =>
        runRefinement(ctx, prepared, { onChunk, families: deps.toolFamilies }),
      );
    },
  );

  app.get(
    '/artifact_types/:artifact_type_slug/artifacts/:artifact_id',
    {
      schema: {
        operationId: 'getArtifact',
        description:
          'An artifact of a project the calling key may use, with its content and public share URL.',
        tags,
        summary: 'Get an artifact',
        params: ArtifactParams,
        response: v1Responses({ 200: ArtifactResponse }),
      },
    },
    async (request) => {
      const { artifact_type_slug: slug, artifact_id: id } = request.params;
      return { artifact: presentArtifact(app.deps.config, await getArtifact(contextOf(request), slug, id)) };
    },
  );

  app.put(
    '/artifact_types/:artifact_type_slug/artifacts/:artifact_id',
    {
      schema: {
        operationId: 'updateArtifact',
        description:
          'Replaces the title or content by hand; `manually_edited` turns true when the content changes.',
        tags,
        summary: 'Edit an artifact (manually_edited turns true when the content changes)',
        params: ArtifactParams,
        body: UpdateArtifactBody,
        response: v1Responses({ 200: ArtifactResponse }),
      },
    },
    async (request) => {
      const { artifact_type_slug: slug, artifact_id: id } = request.params;
      const artifact = await updateArtifact(contextOf(request), slug, id, request.body);
      return { artifact: presentArtifact(app.deps.config, artifact) };
    },
  );

  app.delete(
    '/artifact_types/:artifact_type_slug/artifacts/:artifact_id',
    {
      schema: {
        operationId: 'deleteArtifact',
        description: 'Deletes the artifact; its share page answers 404 afterwards.',
        tags,
        summary: 'Delete an artifact',
        params: ArtifactParams,
        response: v1Responses({ 200: Message }),
      },
    },
    async (request) => {
      const { artifact_type_slug: slug, artifact_id: id } = request.params;
      await deleteArtifact(contextOf(request), slug, id);
      return { message: 'Artifact deleted' };
    },
  );
};
