export * from './registry.js';
export * from './connection.js';
