import { type Static, Type } from '@sinclair/typebox';
import { Defaulted, Id, Nullable } from '../../http/schemas.js';

export const UsageQuery = Type.Object({
  from: Type.Optional(
    Type.String({ format: 'date-time', description: 'Inclusive start (default: 30 days ago)' }),
  ),
  to: Type.Optional(Type.String({ format: 'date-time', description: 'Exclusive end (default: now)' })),
  project_id: Type.Optional(Id()),
  model_configuration_id: Type.Optional(Id({ description: 'Only usage of this model configuration' })),
  group_by: Defaulted(
    Type.Union([Type.Literal('day'), Type.Literal('project'), Type.Literal('key'), Type.Literal('model')], {
      default: 'day',
    }),
  ),
});
export type UsageQuery = Static<typeof UsageQuery>;

const Figures = {
  input_tokens: Type.Integer(),
  output_tokens: Type.Integer(),
  credits: Type.Number(),
  requests: Type.Integer({ description: 'Charged turns and generations' }),
};

export const UsageRow = Type.Object(
  {
    day: Type.Optional(Type.String({ description: 'YYYY-MM-DD (UTC), with group_by=day' })),
    project_id: Type.Optional(Nullable(Type.Integer())),
    api_key_id: Type.Optional(Nullable(Type.Integer())),
    model_configuration_id: Type.Optional(Nullable(Type.Integer())),
    ...Figures,
  },
  { title: 'UsageRow' },
);
export type UsageRow = Static<typeof UsageRow>;

export const UsageResponse = Type.Object(
  {
    usage: Type.Object({
      from: Type.String(),
      to: Type.String(),
      group_by: Type.String(),
      rows: Type.Array(UsageRow),
      totals: Type.Object(Figures),
      credit_balance: Type.Number(),
    }),
  },
  { title: 'UsageResponse' },
);
