export * from './registry.js';
export * from './connection.js';
export * from './private-redis.js';
export * from './keys.js';
