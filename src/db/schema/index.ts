// Every table of the service; drizzle-kit generates migrations from this file.
export * from './core.js';
export * from './management.js';
