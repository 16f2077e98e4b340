// The sources mounted by the ingress and the background tasks the worker role runs for them,
// each from its type in the registry (src/sources/registry.ts) and its settings in the configuration.
import { sourceTypes } from './registry.js';
import type { BackgroundTask, Source, SourceDeps, SourceTaskDeps } from './types.js';

export type { SourceDeps, SourceTaskDeps } from './types.js';

/** `config.sources`: each source type's settings, by its name. */
export type SourcesConfig = Readonly<Record<string, unknown>>;

export function createSources(settings: SourcesConfig, deps: SourceDeps): Source[] {
  return [...sourceTypes.values()].filter((t) => t.name in settings).map((t) => t.routes(settings[t.name], deps));
}

export function startSourceTasks(settings: SourcesConfig, deps: SourceTaskDeps): BackgroundTask[] {
  return [...sourceTypes.values()]
    .filter((t) => t.name in settings)
    .flatMap((t) => t.background?.(settings[t.name], deps) ?? []);
}
