import { artifactTools } from './artifacts.js';
import { integrationTools } from './integrations.js';
import { knowledgeTools } from './knowledge.js';
import type { ToolFamilies } from './registry.js';
import { skillTools } from './skills.js';

/**
 * Every tool family of the service, by the agent `tools` name that enables it. Each family lives
 * in its own module and is added here.
 */
export const toolFamilies: ToolFamilies = {
  knowledge: knowledgeTools,
  integrations: integrationTools,
  artifacts: artifactTools,
  skills: skillTools,
};
