import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { type JSONSchema7, jsonSchema, type Tool, tool } from 'ai';
import type { IntegrationRow } from '../../db/schema/index.js';
import { type McpPool, type McpServerConfig, type McpTool, secretsOf } from '../../mcp/client-pool.js';
import { describeMcpError, McpToolError } from '../../mcp/errors.js';
import {
  errorTextOf,
  type IntegrationToolResult,
  modelTextOf,
  toolResultOf,
} from '../../mcp/tool-results.js';
import { integrationsForProject, namedTools, serverConfigOf } from '../../modules/integrations/service.js';
import type { ToolFamily, ToolScope, ToolSet } from './registry.js';

const MAX_DESCRIPTION = 1024;

/**
 * Every tool of every enabled integration that applies to the scope's project, named
 * `<integration slug>__<tool>`. A server that cannot be reached leaves its tools out of this turn
 * with a note, instead of failing the turn.
 */
export const integrationTools: ToolFamily = async (scope) => {
  const { ctx } = scope;
  const pool = ctx.mcp;
  const rows = await integrationsForProject(ctx, scope.projectId);
  const configs = rows.map((row) => serverConfigOf(ctx, row));
  const listed = await Promise.allSettled(
    configs.map((config) => pool.listTools(config, { signal: scope.signal })),
  );
  const set: ToolSet = { tools: {}, notes: [] };
  listed.forEach((outcome, i) => {
    const row = rows[i];
    if (outcome.status === 'rejected') {
      ctx.log.warn(
        {
          integrationId: row.id,
          integration: row.name,
          reason: describeMcpError(outcome.reason, secretsOf(configs[i])),
        },
        'tool server unavailable for this turn',
      );
      set.notes.push(
        `The tool server "${row.name}" is unavailable right now, so its tools cannot be used in this reply.`,
      );
      return;
    }
    for (const { modelName, tool: serverTool } of namedTools(row.slug, outcome.value)) {
      set.tools[modelName] = integrationTool(pool, scope, row, configs[i], serverTool);
    }
  });
  return set;
};

function integrationTool(
  pool: McpPool,
  scope: ToolScope,
  row: IntegrationRow,
  config: McpServerConfig,
  serverTool: McpTool,
): Tool {
  const description = [
    `Tool "${serverTool.name}" of the connected server "${row.name}".`,
    serverTool.description,
  ]
    .filter(Boolean)
    .join(' ')
    .slice(0, MAX_DESCRIPTION);
  return tool({
    description,
    inputSchema: jsonSchema<Record<string, unknown>>(inputSchemaOf(serverTool)),
    execute: async (input, { abortSignal }): Promise<IntegrationToolResult> => {
      let result: Awaited<ReturnType<McpPool['callTool']>>;
      try {
        result = await pool.callTool(config, serverTool.name, input ?? {}, {
          signal: abortSignal ?? scope.signal,
        });
      } catch (error) {
        throw new McpToolError(callFailure(pool, config, error));
      }
      // The server ran the tool and said it failed: a failed tool execution, not a broken turn.
      if (result.isError) throw new McpToolError(errorTextOf(result));
      return toolResultOf(result);
    },
    toModelOutput: ({ output }) => ({ type: 'text', value: modelTextOf(output) }),
  });
}

function callFailure(pool: McpPool, config: McpServerConfig, error: unknown): string {
  if (error instanceof McpError && error.code === ErrorCode.RequestTimeout) {
    return `The tool did not answer within ${pool.settings.callTimeoutMs} ms`;
  }
  if (error instanceof McpError)
    return `The tool server refused the call: ${describeMcpError(error, secretsOf(config))}`;
  return `The tool server could not be reached: ${describeMcpError(error, secretsOf(config))}`;
}

/** Providers want an object schema with `properties`; MCP only promises `type: "object"`. */
function inputSchemaOf(serverTool: McpTool): JSONSchema7 {
  const schema = { ...(serverTool.inputSchema as JSONSchema7) };
  schema.type = 'object';
  if (!schema.properties) schema.properties = {};
  return schema;
}
