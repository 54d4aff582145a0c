import type { ToolFamilies } from './registry.js';

/**
 * Every tool family of the service, by the agent `tools` name that enables it. Each family lives
 * in its own module and is added here.
 */
export const toolFamilies: ToolFamilies = {};
