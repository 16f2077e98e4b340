export * from './registry.js';
export * from './connection.js';
export * from './keys.js';
