import { type Static, Type } from '@sinclair/typebox';
import { Id, Nullable, Timestamp } from '../../http/schemas.js';
import { ResponseFormat } from '../../turns/structured-output.js';

export const ArtifactTypeParams = Type.Object({
  artifact_type_slug: Type.String({ minLength: 1, maxLength: 200, description: 'Slug of the artifact type' }),
});
export type ArtifactTypeParams = Static<typeof ArtifactTypeParams>;

export const ArtifactParams = Type.Object({
  artifact_type_slug: Type.String({ minLength: 1, maxLength: 200, description: 'Slug of the artifact type' }),
  artifact_id: Id(),
});
export type ArtifactParams = Static<typeof ArtifactParams>;

export const ProjectQuery = Type.Object({
  project_id: Id({ description: 'The project the artifact is for (required)' }),
});
export type ProjectQuery = Static<typeof ProjectQuery>;

const SkillInput = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200 }),
    value: Type.String({ maxLength: 100_000 }),
  },
  { title: 'SkillInput' },
);

export const GenerateBody = Type.Object(
  {
    skill_id: Type.Optional(Id({ description: 'The skill to run; it must belong to the artifact type' })),
    prompt_template_id: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 2147483647,
        description: 'Deprecated name of skill_id',
        deprecated: true,
      }),
    ),
    inputs: Type.Array(SkillInput, {
      maxItems: 200,
      description: "Values of the skill's custom variables; [] when it has none",
    }),
    name: Type.Optional(
      Type.String({ minLength: 1, maxLength: 200, description: 'Otherwise the model names the artifact' }),
    ),
    model_configuration_id: Type.Optional(Id({ description: "Overrides the organization's default model" })),
    fire_and_forget: Type.Optional(
      Type.Boolean({ description: 'Non-streaming endpoint only: run in the background' }),
    ),
    response_format: Type.Optional(ResponseFormat),
  },
  { title: 'GenerateBody' },
);
export type GenerateBody = Static<typeof GenerateBody>;

export const StreamGenerateBody = Type.Omit(GenerateBody, ['fire_and_forget'], {
  title: 'StreamGenerateBody',
});
export type StreamGenerateBody = Static<typeof StreamGenerateBody>;

export const RefineBody = Type.Object(
  {
    // Optional here so that a missing prompt is the 400 the spec asks for, checked by the route.
    refine_prompt: Type.Optional(
      Type.String({ maxLength: 100_000, description: 'What to change (required)' }),
    ),
    model_configuration_id: Type.Optional(Id({ description: 'Overrides the model that wrote the artifact' })),
    fire_and_forget: Type.Optional(
      Type.Boolean({ description: 'Non-streaming endpoint only: refine in the background' }),
    ),
  },
  { title: 'RefineBody' },
);
export type RefineBody = Static<typeof RefineBody>;

export const StreamRefineBody = Type.Omit(RefineBody, ['fire_and_forget'], { title: 'StreamRefineBody' });

export const UpdateArtifactBody = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    content: Type.Optional(Type.String({ maxLength: 1_000_000 })),
    notes: Type.Optional(Nullable(Type.String({ maxLength: 100_000 }))),
  },
  { title: 'UpdateArtifactBody' },
);
export type UpdateArtifactBody = Static<typeof UpdateArtifactBody>;

export const ChatHistoryEntry = Type.Object(
  {
    role: Type.Union([Type.Literal('user'), Type.Literal('assistant'), Type.Literal('tool')]),
    content: Type.String(),
    tool_name: Type.Optional(Type.String()),
    tool_call_id: Type.Optional(Type.String()),
    parameters: Type.Optional(Type.Unknown()),
    error: Type.Optional(Nullable(Type.String())),
  },
  {
    title: 'ChatHistoryEntry',
    description: 'user and assistant turns; tool entries record tools the model used while writing',
  },
);

const usageSchema = (description: string) =>
  Type.Object(
    { input_tokens: Type.Integer(), output_tokens: Type.Integer(), credits: Type.Number() },
    { description },
  );

export const Artifact = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    content: Type.String({ description: 'Markdown' }),
    manually_edited: Type.Boolean(),
    notes: Nullable(Type.String()),
    share_token: Type.String(),
    chat_history: Type.Array(ChatHistoryEntry),
    url: Type.String({ description: 'The public, read-only share page' }),
    project_id: Type.Integer(),
    artifact_type_slug: Type.String(),
    skill_id: Nullable(Type.Integer()),
    chat_id: Nullable(Type.Integer()),
    model_configuration_id: Nullable(Type.Integer()),
    usage: usageSchema('Totals over the generation and every refinement'),
    created_at: Timestamp,
    updated_at: Timestamp,
    parsed: Type.Optional(
      Type.Unknown({
        description:
          'Generated with `response_format`: the JSON value the content holds (dropped once the content is refined or edited)',
      }),
    ),
  },
  { title: 'Artifact' },
);
export type Artifact = Static<typeof Artifact>;

export const ArtifactWithUrlResponse = Type.Object(
  {
    artifact: Artifact,
    url: Type.String(),
    usage: usageSchema('What this request used and was charged'),
  },
  { title: 'ArtifactWithUrlResponse' },
);

export const ArtifactResponse = Type.Object({ artifact: Artifact }, { title: 'ArtifactResponse' });
