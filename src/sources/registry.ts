// Every kind of source callsync knows: one line per source type (src/sources/types.ts). Its
// environment variables join the one schema (src/config/env.ts), its settings the configuration
// (`config.sources.<name>`), its routes the ingress and its background tasks the worker role.
import { mergeEnvShapes, type EnvShape } from '../env-values.js';
import { aiAgentSourceType } from './ai-agent.js';
import { pushSourceType } from './push.js';
import type { SourceType } from './types.js';

const types = new Map<string, SourceType>([aiAgentSourceType, pushSourceType].map((t) => [t.name, t]));

export const sourceTypes: ReadonlyMap<string, SourceType> = types;

/**
 * Adds a source type from outside this file (a plugin, or a test's example source), before the
 * configuration is loaded. Throws on a name already taken.
 * @public The extension point for sources (docs/architecture.md, "Adding a source").
 */
export function registerSourceType(type: SourceType): () => void {
  if (types.has(type.name)) throw new Error(`a source named "${type.name}" is already registered`);
  types.set(type.name, type);
  return () => {
    types.delete(type.name);
  };
}

/** Every variable a source type reads. */
export const sourceEnv = (): EnvShape => mergeEnvShapes([...types.values()].map((t) => t.env ?? {}));
