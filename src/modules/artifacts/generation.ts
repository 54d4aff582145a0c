import { randomBytes, randomUUID } from 'node:crypto';
import type { ModelMessage } from 'ai';
import { eq, sql } from 'drizzle-orm';
import type { ServiceContext } from '../../core/context.js';
import type { Queryable } from '../../db/client.js';
import {
  type ArtifactTypeRow,
  artifacts,
  artifactTypes,
  type ChatHistoryEntry,
  type ProjectRow,
  type SkillRow,
} from '../../db/schema/index.js';
import { ApiError, unprocessable } from '../../http/errors.js';
import { recordEvent } from '../../jobs/outbox.js';
import { collectTools, type ToolFamilies } from '../../llm/tools/registry.js';
import { genAiModel, traceModel, traceTools, withSpan } from '../../telemetry/tracing.js';
import type { TurnTiming } from '../../telemetry/turn-timing.js';
import {
  compileResponseFormat,
  type ResponseFormat,
  type StructuredOutput,
  settleStructuredOutput,
  structuredOutputInstruction,
  withStructuredOutput,
} from '../../turns/structured-output.js';
import { chargeUsage, costOf, ensureCredits, type Usage } from '../credits/service.js';
import { type ResolvedModel, resolveModel } from '../model-configurations/resolve.js';
import {
  type ArtifactRecord,
  findArtifact,
  findArtifactType,
  findSkillOfType,
  findWritableProject,
} from './lookup.js';
import { type ModelRunResult, runModel } from './model-run.js';
import {
  checkInputs,
  fillPlaceholders,
  nameFromContent,
  refineInstruction,
  type SkillInput,
  systemPrompt,
} from './prompt.js';

/** Tools offered while writing an artifact (spec 9: connected tool servers during generation). */
const GENERATION_TOOLS = ['knowledge', 'integrations'] as const;

export interface GenerateArtifactInput {
  artifactTypeSlug: string;
  projectId: number;
  skillId: number;
  inputs: SkillInput[];
  /** Otherwise named from the generated content (its title heading or first line). */
  name?: string | null;
  modelConfigurationId?: number | null;
  /** Set when an assistant makes the artifact during a chat turn. */
  chatId?: number | null;
  /** The request's `api_async_create_event_id`; a fresh UUID when not given. */
  asyncEventId?: string;
  /** `response_format` (issue 18): the content must be JSON following the schema. */
  responseFormat?: ResponseFormat;
}

export interface RefineArtifactInput {
  /** The type the path names; null accepts any type (the chat tools know only the id). */
  artifactTypeSlug: string | null;
  artifactId: number;
  refinePrompt: string;
  modelConfigurationId?: number | null;
  asyncEventId?: string;
}

export interface RunOptions {
  /** Each text delta as the model writes it; the saved content is their concatenation. */
  onChunk?: (text: string) => void;
  signal?: AbortSignal;
  /** The tool families to draw from: the process's (AppDeps), or a calling tool's. */
  families: ToolFamilies;
  /**
   * The longest the whole run may take, for callers a client waits on without a stream (blocking
   * requests: REPLY_TIMEOUT_MS). Streams and work nobody waits on have none: a model silent for
   * MODEL_IDLE_TIMEOUT_MS fails them instead.
   */
  deadlineMs?: number;
  /** The blocking request's clock (its Server-Timing header): model marks and database steps. */
  timing?: TurnTiming;
}

export interface ArtifactUsage {
  inputTokens: number;
  outputTokens: number;
  credits: number;
}

export interface ArtifactResult {
  artifact: ArtifactRecord;
  /** What this generation or refinement used and was charged. */
  usage: ArtifactUsage;
  asyncEventId: string;
}

export interface PreparedGeneration {
  input: GenerateArtifactInput;
  artifactType: ArtifactTypeRow;
  project: ProjectRow;
  skill: SkillRow;
  prompt: string;
  resolved: ResolvedModel;
  structured?: StructuredOutput;
}

export interface PreparedRefinement {
  input: RefineArtifactInput;
  artifact: ArtifactRecord;
  artifactType: ArtifactTypeRow;
  project: ProjectRow;
  resolved: ResolvedModel;
}

/**
 * Every check a generation request must pass before any model runs, in the order a client fixes
 * them: type (404), project (404, archived 422), skill of that type (404), inputs (422), model
 * configuration (404), credits (402). Fire-and-forget callers run this before accepting the request.
 */
export async function prepareGeneration(
  ctx: ServiceContext,
  input: GenerateArtifactInput,
): Promise<PreparedGeneration> {
  const artifactType = await findArtifactType(ctx, input.artifactTypeSlug);
  const project = await findWritableProject(ctx, input.projectId);
  const skill = await findSkillOfType(ctx, input.skillId, artifactType.id);
  const values = checkInputs(skill.content, skill.customVariables, input.inputs);
  const prompt = fillPlaceholders(skill.content, values);
  if (prompt.trim() === '') {
    throw unprocessable('The skill has no content to send to the model', { skill_id: ['has no content'] });
  }
  const structured = compileResponseFormat(input.responseFormat);
  const resolved = await resolveModel(ctx, input.modelConfigurationId);
  await ensureCredits(ctx.db, ctx.principal.organizationId);
  return { input, artifactType, project, skill, prompt, resolved, structured };
}

export async function generateArtifact(
  ctx: ServiceContext,
  input: GenerateArtifactInput,
  options: RunOptions,
): Promise<ArtifactResult> {
  return runGeneration(ctx, await prepareGeneration(ctx, input), options);
}

/** Runs a prepared generation; the artifact exists only once the model has finished. */
export async function runGeneration(
  ctx: ServiceContext,
  prepared: PreparedGeneration,
  options: RunOptions,
): Promise<ArtifactResult> {
  const { input, artifactType, project, skill, prompt, resolved, structured } = prepared;
  const toolSet = await collectTools(options.families, [...GENERATION_TOOLS], {
    ctx,
    projectId: project.id,
    chatId: input.chatId ?? null,
    agentId: null,
    signal: options.signal,
  });
  const run = await traceArtifactRun('generation', resolved, artifactType.slug, async (model) => {
    const system = systemPrompt({ artifactType, project, toolNotes: toolSet.notes });
    const result = await runModel({
      model: structured ? withStructuredOutput(model, structured) : model,
      system: structured ? `${system}\n\n${structuredOutputInstruction(structured)}` : system,
      messages: [{ role: 'user', content: prompt }],
      tools: traceTools(toolSet.tools),
      deadlineMs: options.deadlineMs,
      idleMs: ctx.config.modelIdleTimeoutMs,
      timing: options.timing,
      // A structured reply is sent as one chunk once valid.
      onChunk: structured ? undefined : options.onChunk,
      signal: options.signal,
    });
    return structured ? settleArtifactOutput(structured, result, model, options) : result;
  });
  const history: ChatHistoryEntry[] = [
    { role: 'user', content: prompt },
    ...run.toolEntries,
    { role: 'assistant', content: run.text },
  ];
  const name = input.name?.trim() || nameFromContent(run.text, `${skill.name} (${artifactType.name})`);
  const asyncEventId = input.asyncEventId ?? randomUUID();
  const credits = costOf(run.usage, resolved.prices);

  const id = await timed(
    options,
    ctx.db.transaction(async (tx) => {
      const [row] = await tx
        .insert(artifacts)
        .values({
          organizationId: ctx.principal.organizationId,
          projectId: project.id,
          artifactTypeId: artifactType.id,
          skillId: skill.id,
          chatId: input.chatId ?? null,
          modelConfigurationId: resolved.configuration.id,
          apiKeyId: ctx.principal.keyId,
          userId: ctx.principal.userId,
          name,
          content: run.text,
          parsed: run.parsed,
          shareToken: newShareToken(),
          chatHistory: history,
          inputTokens: run.usage.inputTokens,
          outputTokens: run.usage.outputTokens,
          credits,
        })
        .returning({ id: artifacts.id });
      await charge(tx, ctx, project.id, resolved, run.usage, row.id);
      await recordEvent(tx, {
        organizationId: ctx.principal.organizationId,
        projectId: project.id,
        eventName: 'artifact_generated',
        eventData: eventData(name, row.id, artifactType.slug, project.id, asyncEventId, input.chatId ?? null),
      });
      return row.id;
    }),
  );
  // Counted once the charge is committed.
  ctx.metrics.countUsage(resolved.configuration.provider, resolved.configuration.model, run.usage, credits);
  return {
    artifact: await findArtifact(ctx, id, null),
    usage: { inputTokens: run.usage.inputTokens, outputTokens: run.usage.outputTokens, credits },
    asyncEventId,
  };
}

/** The checks of a refinement before any model runs: artifact (404), project (archived 422), model (404), credits (402). */
export async function prepareRefinement(
  ctx: ServiceContext,
  input: RefineArtifactInput,
): Promise<PreparedRefinement> {
  if (input.refinePrompt.trim() === '') {
    throw new ApiError(400, 'invalid_request', 'refine_prompt must not be empty', {
      refine_prompt: ['is required'],
    });
  }
  const artifact = await findArtifact(ctx, input.artifactId, input.artifactTypeSlug);
  const project = await findWritableProject(ctx, artifact.projectId);
  const [artifactType] = await ctx.db
    .select()
    .from(artifactTypes)
    .where(eq(artifactTypes.id, artifact.artifactTypeId));
  const resolved = await refinementModel(ctx, input.modelConfigurationId ?? null, artifact);
  await ensureCredits(ctx.db, ctx.principal.organizationId);
  return { input, artifact, artifactType, project, resolved };
}

export async function refineArtifact(
  ctx: ServiceContext,
  input: RefineArtifactInput,
  options: RunOptions,
): Promise<ArtifactResult> {
  return runRefinement(ctx, await prepareRefinement(ctx, input), options);
}

/**
 * The model sees the artifact's whole conversation plus the instruction and answers with the whole
 * new document; content and history change together, and only once the model has finished.
 */
export async function runRefinement(
  ctx: ServiceContext,
  prepared: PreparedRefinement,
  options: RunOptions,
): Promise<ArtifactResult> {
  const { input, artifact, artifactType, project, resolved } = prepared;
  const toolSet = await collectTools(options.families, [...GENERATION_TOOLS], {
    ctx,
    projectId: project.id,
    chatId: artifact.chatId,
    agentId: null,
    signal: options.signal,
  });
  const conversation = artifact.chatHistory.filter(
    (entry): entry is ChatHistoryEntry & { role: 'user' | 'assistant' } =>
      entry.role === 'user' || entry.role === 'assistant',
  );
  const modelLastSaw = conversation.findLast((entry) => entry.role === 'assistant')?.content ?? null;
  const messages: ModelMessage[] = [
    ...conversation.map((entry) => ({ role: entry.role, content: entry.content })),
    { role: 'user', content: refineInstruction(input.refinePrompt, artifact.content, modelLastSaw) },
  ];
  const run = await traceArtifactRun('refinement', resolved, artifactType.slug, (model) =>
    runModel({
      model,
      system: systemPrompt({ artifactType, project, toolNotes: toolSet.notes }),
      messages,
      tools: traceTools(toolSet.tools),
      deadlineMs: options.deadlineMs,
      idleMs: ctx.config.modelIdleTimeoutMs,
      timing: options.timing,
      onChunk: options.onChunk,
      signal: options.signal,
    }),
  );
  const exchange: ChatHistoryEntry[] = [
    { role: 'user', content: input.refinePrompt },
    ...run.toolEntries,
    { role: 'assistant', content: run.text },
  ];
  const asyncEventId = input.asyncEventId ?? randomUUID();
  const credits = costOf(run.usage, resolved.prices);

  await timed(
    options,
    ctx.db.transaction(async (tx) => {
      const updated = await tx
        .update(artifacts)
        .set({
          content: run.text,
          parsed: null,
          // Appended in SQL so two refinements finishing together both keep their exchange.
          chatHistory: sql`${artifacts.chatHistory} || ${JSON.stringify(exchange)}::jsonb`,
          inputTokens: sql`${artifacts.inputTokens} + ${run.usage.inputTokens}`,
          outputTokens: sql`${artifacts.outputTokens} + ${run.usage.outputTokens}`,
          credits: sql`${artifacts.credits} + ${credits}`,
          updatedAt: sql`now()`,
        })
        .where(eq(artifacts.id, artifact.id))
        .returning({ id: artifacts.id, name: artifacts.name });
      // Deleted while the model was writing: nothing to refine, nothing to charge for a lost result.
      if (updated.length === 0) throw new ApiError(404, 'artifact_not_found', 'Artifact not found');
      await charge(tx, ctx, project.id, resolved, run.usage, artifact.id);
      await recordEvent(tx, {
        organizationId: ctx.principal.organizationId,
        projectId: project.id,
        eventName: 'artifact_refined',
        eventData: eventData(
          updated[0].name,
          artifact.id,
          artifact.artifactTypeSlug,
          project.id,
          asyncEventId,
          artifact.chatId,
        ),
      });
    }),
  );
  // Counted once the charge is committed.
  ctx.metrics.countUsage(resolved.configuration.provider, resolved.configuration.model, run.usage, credits);
  return {
    artifact: await findArtifact(ctx, artifact.id, null),
    usage: { inputTokens: run.usage.inputTokens, outputTokens: run.usage.outputTokens, credits },
    asyncEventId,
  };
}

/** Awaits a database step, on the blocking request's clock when it has one. */
function timed<T>(options: RunOptions, step: Promise<T>): Promise<T> {
  return options.timing ? options.timing.db(step) : step;
}

/** The requested model, else the one that wrote the artifact (if it is still a usable chat model), else the default. */
function refinementModel(
  ctx: ServiceContext,
  requested: number | null,
  artifact: ArtifactRecord,
): Promise<ResolvedModel> {
  return resolveModel(ctx, requested, [artifact.modelConfigurationId]);
}

async function charge(
  tx: Queryable,
  ctx: ServiceContext,
  projectId: number,
  resolved: ResolvedModel,
  usage: Usage,
  artifactId: number,
) {
  await chargeUsage(tx, {
    organizationId: ctx.principal.organizationId,
    projectId,
    apiKeyId: ctx.principal.keyId,
    modelConfigurationId: resolved.configuration.id,
    usage,
    prices: resolved.prices,
    reference: `artifact:${artifactId}`,
  });
}

/** A structured generation's text validated (one repair), then sent to a stream as one chunk. */
async function settleArtifactOutput(
  structured: StructuredOutput,
  result: ModelRunResult,
  model: ResolvedModel['model'],
  options: RunOptions,
): Promise<ModelRunResult> {
  const settled = await settleStructuredOutput(structured, result.text, { model, signal: options.signal });
  options.onChunk?.(settled.text);
  return {
    ...result,
    text: settled.text,
    parsed: settled.parsed,
    usage: {
      inputTokens: result.usage.inputTokens + settled.usage.inputTokens,
      outputTokens: result.usage.outputTokens + settled.usage.outputTokens,
    },
  };
}

/** Spec 6.3: `chat_id` appears only when the artifact came from a chat. */
function eventData(
  name: string,
  artifactId: number,
  artifactTypeSlug: string,
  projectId: number,
  asyncEventId: string,
  chatId: number | null,
): Record<string, unknown> {
  return {
    name,
    artifact_id: artifactId,
    artifact_type_slug: artifactTypeSlug,
    project_id: projectId,
    api_async_create_event_id: asyncEventId,
    ...(chatId !== null ? { chat_id: chatId } : {}),
  };
}

/** 192 random bits: the share page's only protection, so it must not be guessable. */
function newShareToken(): string {
  return randomBytes(24).toString('base64url');
}

/** An artifact generation or refinement as a `generate_content` span around its model calls. */
function traceArtifactRun(
  kind: 'generation' | 'refinement',
  resolved: ResolvedModel,
  artifactTypeSlug: string,
  run: (model: ResolvedModel['model']) => Promise<ModelRunResult>,
): Promise<ModelRunResult> {
  const { provider, model } = resolved.configuration;
  return withSpan(
    `generate_content ${model}`,
    {
      'gen_ai.operation.name': 'generate_content',
      ...genAiModel(provider, model),
      'scriptorium.artifact.operation': kind,
      'scriptorium.artifact_type': artifactTypeSlug,
    },
    async (span) => {
      const result = await run(traceModel(resolved.model, provider, model));
      span.setAttributes({
        'gen_ai.usage.input_tokens': result.usage.inputTokens,
        'gen_ai.usage.output_tokens': result.usage.outputTokens,
        ...(result.finishReason ? { 'gen_ai.response.finish_reasons': [result.finishReason] } : {}),
      });
      return result;
    },
  );
}
