import type { AgentRow, ChatRow, ModelConfigurationRow, ProjectRow } from '../db/schema/index.js';

/** Everything a turn needs, checked before the request is accepted (404/401 come from its checks). */
export interface TurnPlan {
  chat: ChatRow;
  project: ProjectRow;
  agent: AgentRow | null;
  configuration: ModelConfigurationRow;
}
