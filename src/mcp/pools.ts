import type { Config } from '../config.js';
import { DEFAULT_MCP_POOL_OPTIONS, McpPool } from './client-pool.js';

// One pool per app, found from the app's Config object (built once per app and shared by every
// ServiceContext), so tool families reach it through the context they are given, and tests that
// build several apps get one pool each.
const pools = new WeakMap<Config, McpPool>();

export function mcpPoolFor(owner: { config: Config }): McpPool {
  let pool = pools.get(owner.config);
  if (!pool) {
    pool = new McpPool({ ...DEFAULT_MCP_POOL_OPTIONS, allowPrivate: owner.config.outboundAllowPrivate });
    pools.set(owner.config, pool);
  }
  return pool;
}

/** Closes the app's connections (on shutdown). */
export async function closeMcpPool(owner: { config: Config }): Promise<void> {
  const pool = pools.get(owner.config);
  if (!pool) return;
  pools.delete(owner.config);
  await pool.close();
}
