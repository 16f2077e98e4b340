// What a configuration is refused for, for the configuration tests.
import assert from 'node:assert/strict';
import { ConfigError, loadConfig } from '../../src/config/index.js';

/** The problems `fn` (a `loadConfig`) throws, or the environment `env` is refused for; fails the test if it is taken. */
export function configProblems(env: Record<string, string> | (() => unknown)): string[] {
  try {
    if (typeof env === 'function') env();
    else loadConfig(env);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.problems;
  }
  assert.fail(
    typeof env === 'function' ? 'expected a ConfigError' : `expected a ConfigError for ${JSON.stringify(env)}`,
  );
}
