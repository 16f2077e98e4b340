// Only src/config reads the environment (docs/architecture.md "Who reads the environment"): the
// rest reads its section of the configuration. Checked on the source of src/, queues/ and workers/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** Files that may read process.env, and why (keep in step with docs/architecture.md). */
const PROCESS_ENV_ALLOWED = new Set([
  'src/log.ts', // LOG_LEVEL default of loggers made before the configuration
  'src/telemetry.ts', // the OpenTelemetry SDK's own OTEL_* variables
  'queues/private-redis.ts', // PATH, to find redis-server
  'src/cli/io.ts', // the CLI hands the environment to loadConfig
  'workers/run.ts', // hands it to the OpenTelemetry SDK
]);

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : path.endsWith('.ts') ? [path] : [];
  });
}

/** `process.env` outside the allowed files, and `config.env.X` reads, outside src/config. */
export function environmentReads(file: string, text: string): string[] {
  if (file.startsWith('src/config/')) return [];
  const found: string[] = [];
  text.split('\n').forEach((line, i) => {
    if (/^\s*(\/\/|\*)/.test(line)) return;
    if (/process\.env\b/.test(line) && !PROCESS_ENV_ALLOWED.has(file)) found.push(`${file}:${i + 1}: process.env`);
    const read =
      /\b(?:config|cfg)\.env\b(?:\.[A-Z][A-Z0-9_]*)?/.exec(line) ??
      // A sink or source handed the environment instead of its settings (SinkDeps.settings).
      /\b(?:deps|this\.deps)\.env\b|\benvOf\(/.exec(line) ??
      /(?<!process\.)\benv\.(?:OPS_|ADMIN_|SPOOL_|CALL_TIMELINE|CALL_INDEX|METRICS_TOKEN|RETENTION_|ARCHIVE_RETENTION|COMPLETED_JOB|FAILED_JOB|LOG_LEVEL|CALLSYNC_CONFIG|POLL_|PUSH_|WEBHOOK_|HTTP_|ACK_|REDIS_|QUEUE_PREFIX)[A-Z0-9_]*/.exec(
        line,
      );
    if (read && !(file.startsWith('src/sources/') && /PUSH_/.test(read[0]))) found.push(`${file}:${i + 1}: ${read[0]}`);
  });
  return found;
}

test('only src/config reads the environment; the rest reads its section of the configuration', () => {
  const all = ['src', 'queues', 'workers'].flatMap((d) => files(join(ROOT, d)));
  assert.ok(all.length > 50);
  const reads = all.flatMap((path) => {
    const file = relative(ROOT, path).split('\\').join('/');
    return environmentReads(file, readFileSync(path, 'utf8'));
  });
  assert.deepEqual(reads, []);
});

test('the check sees a read', () => {
  assert.deepEqual(environmentReads('workers/x.ts', 'const port = config.env.OPS_PORT;\nconst a = process.env.X;'), [
    'workers/x.ts:1: config.env.OPS_PORT',
    'workers/x.ts:2: process.env',
  ]);
  assert.deepEqual(environmentReads('src/config/x.ts', 'process.env.X'), []);
});

test('the check sees a sink reading the environment instead of its settings', () => {
  assert.deepEqual(
    environmentReads(
      'src/sinks/crm/x.ts',
      [
        'const token = options.apiToken ?? deps.env.X_API_TOKEN;',
        'const env = envOf(xEnv, this.deps.env);',
        'create(name, options, { ...deps, env: config.env });',
        'const token = options.apiToken ?? deps.settings.X_API_TOKEN;',
      ].join('\n'),
    ),
    ['src/sinks/crm/x.ts:1: deps.env', 'src/sinks/crm/x.ts:2: envOf(', 'src/sinks/crm/x.ts:3: config.env'],
  );
});
