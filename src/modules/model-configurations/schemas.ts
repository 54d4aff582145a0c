import { type Static, Type } from '@sinclair/typebox';
import { Pagination } from '../../http/pagination.js';
import { NameText, Nullable, OneOf, Timestamp } from '../../http/schemas.js';
import { PROVIDER_NAMES, type ProviderName } from '../../llm/providers.js';

export const PURPOSES = ['chat', 'embedding'] as const;
export type Purpose = (typeof PURPOSES)[number];

const Credits = Type.Number({ minimum: 0, description: 'Credits charged per 1,000 tokens (default 0)' });

export const ModelConfiguration = Type.Object(
  {
    id: Type.Integer(),
    name: Type.String(),
    provider: Type.String({ description: PROVIDER_NAMES.join(' | ') }),
    model: Type.String(),
    base_url: Nullable(Type.String()),
    purpose: Type.String({ description: PURPOSES.join(' | ') }),
    is_default: Type.Boolean({ description: "The organization's default model for chats and generations" }),
    has_api_key: Type.Boolean({
      description: 'Whether a provider key is stored (the key itself is never shown)',
    }),
    credits_per_1k_input_tokens: Type.Number(),
    credits_per_1k_output_tokens: Type.Number(),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { title: 'ModelConfiguration' },
);
export type ModelConfiguration = Static<typeof ModelConfiguration>;

const fields = {
  name: NameText(200),
  provider: OneOf<ProviderName>(PROVIDER_NAMES),
  model: Type.String({
    minLength: 1,
    maxLength: 200,
    description: 'The provider model id; optional for builtin',
  }),
  base_url: Nullable(
    Type.String({
      maxLength: 2000,
      description: 'http(s) URL of the API, e.g. http://127.0.0.1:1234/v1; required for openai-compatible',
    }),
  ),
  api_key: Nullable(
    Type.String({
      minLength: 1,
      maxLength: 4000,
      description: 'Write-only: stored encrypted, never returned. null removes it.',
    }),
  ),
  is_default: Type.Boolean({
    description: 'true makes this the default; the previous default stops being it',
  }),
  purpose: OneOf<Purpose>(PURPOSES),
  credits_per_1k_input_tokens: Credits,
  credits_per_1k_output_tokens: Credits,
};

export const CreateModelConfigurationBody = Type.Object(
  {
    name: fields.name,
    provider: fields.provider,
    model: Type.Optional(fields.model),
    base_url: Type.Optional(fields.base_url),
    api_key: Type.Optional(fields.api_key),
    is_default: Type.Optional(fields.is_default),
    purpose: Type.Optional(fields.purpose),
    credits_per_1k_input_tokens: Type.Optional(fields.credits_per_1k_input_tokens),
    credits_per_1k_output_tokens: Type.Optional(fields.credits_per_1k_output_tokens),
  },
  { title: 'CreateModelConfigurationBody' },
);
export type CreateModelConfigurationBody = Static<typeof CreateModelConfigurationBody>;

export const UpdateModelConfigurationBody = Type.Partial(CreateModelConfigurationBody, {
  title: 'UpdateModelConfigurationBody',
});
export type UpdateModelConfigurationBody = Static<typeof UpdateModelConfigurationBody>;

export const ModelConfigurationResponse = Type.Object(
  { model_configuration: ModelConfiguration },
  { title: 'ModelConfigurationResponse' },
);
export const ModelConfigurationListResponse = Type.Object(
  {
    model_configurations: Type.Array(ModelConfiguration),
    pagination: Pagination,
  },
  { title: 'ModelConfigurationListResponse' },
);
