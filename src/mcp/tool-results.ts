import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';

/** A tool execution's `result`: the server's content blocks and, when it sent one, its structured result. */
export interface IntegrationToolResult {
  content: CallToolResult['content'];
  structured_content?: Record<string, unknown>;
}

export function toolResultOf(result: CallToolResult): IntegrationToolResult {
  return {
    content: result.content ?? [],
    ...(result.structuredContent === undefined ? {} : { structured_content: result.structuredContent }),
  };
}

/**
 * What the model reads back: the text blocks (servers that send structured content also send it
 * as text, per the MCP spec), else the structured result as JSON. Binary blocks are named, not
 * inlined, since not every provider accepts media in tool results.
 */
export function modelTextOf(result: IntegrationToolResult): string {
  const parts: string[] = [];
  for (const block of result.content) {
    switch (block.type) {
      case 'text':
        parts.push(block.text);
        break;
      case 'image':
      case 'audio':
        parts.push(`[${block.type} ${block.mimeType}]`);
        break;
      case 'resource':
        parts.push('text' in block.resource ? block.resource.text : `[resource ${block.resource.uri}]`);
        break;
      case 'resource_link':
        parts.push(`[resource ${block.uri}${block.name ? ` (${block.name})` : ''}]`);
        break;
    }
  }
  if (parts.length > 0) return parts.join('\n');
  if (result.structured_content !== undefined) return JSON.stringify(result.structured_content);
  return '(the tool returned no content)';
}

/** The error text of an `isError` result. */
export function errorTextOf(result: CallToolResult): string {
  const text = modelTextOf(toolResultOf(result));
  return text === '(the tool returned no content)' ? 'The tool reported an error' : text;
}
