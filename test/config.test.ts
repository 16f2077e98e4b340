// Configuration: env defaults, the YAML file with ${ENV} interpolation, routes, and every bad key reported.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { loadConfig } from '../src/config/index.js';
import { envSchema } from '../src/config/env.js';
import { sinkTypes } from '../src/sinks/registry.js';
import { CALL_SOURCES, DIRECTIONS, OUTCOMES } from '../src/model/call.js';
import { sinksFor } from '../src/routing/router.js';
import { sampleCall } from './support/calls.js';
import { describeConfig } from '../src/cli/check-config.js';
import { configProblems } from './support/config.js';

const withFile = (yaml: string, env: Record<string, string> = {}) =>
  loadConfig({ CALLSYNC_CONFIG: '/etc/callsync.yaml', ...env }, { readFile: () => yaml });

test('defaults: all roles, port 3000, local Redis, the platform allow list, a local archive', () => {
  const config = loadConfig({});
  assert.equal(config.role, 'all');
  assert.equal(config.http.port, 3000);
  assert.equal(config.redis.url, 'redis://127.0.0.1:6379');
  assert.deepEqual(config.webhook.allowedIps, ['217.116.118.254', '212.9.46.32']);
  assert.equal(config.webhook.trustProxyHops, undefined);
  assert.deepEqual(config.webhook.trustedProxies, []);
  assert.deepEqual(
    {
      requestTimeoutMs: config.http.requestTimeoutMs,
      headersTimeoutMs: config.http.headersTimeoutMs,
      maxConnections: config.http.maxConnections,
    },
    { requestTimeoutMs: 30_000, headersTimeoutMs: 10_000, maxConnections: 1000 },
  );
  assert.equal(config.webhook.bodyLimitBytes, 8 * 1024 * 1024, '8 MiB: ten times the largest realistic call');
  assert.equal(config.webhook.dedupeWindowMs, 24 * 3600 * 1000);
  assert.equal(config.sinks.archive?.type, 'archive');
  assert.equal((config.sinks.archive?.options as { dir: string }).dir, './data/archive');
  assert.deepEqual(sinksFor(config.routes, sampleCall('x')), ['archive']);
});

test('DATA_DIR holds the spool and the local archive unless SPOOL_DIR / ARCHIVE_DIR name others', () => {
  // Before, a second instance given its own DATA_DIR still spooled into ./data/spool — which the
  // first one held, so it ran without a spool — and archived into ./data/archive.
  const config = loadConfig({ DATA_DIR: '/srv/second/', QUEUE_PREFIX: 'cs' });
  assert.equal(config.spool.dir, '/srv/second/spool/cs');
  assert.equal((config.sinks.archive?.options as { dir: string }).dir, '/srv/second/archive');
  const file = withFile('sinks:\n  store: { type: archive }\nroutes:\n  - to: store\n', { DATA_DIR: '/srv/second' });
  assert.equal((file.sinks.store?.options as { dir: string }).dir, '/srv/second/archive', "a file's folder sink");
  const named = loadConfig({ DATA_DIR: '/srv/second', SPOOL_DIR: '/var/spool/cs', ARCHIVE_DIR: '/calls' });
  assert.equal(named.spool.dir, '/var/spool/cs/callsync');
  assert.equal((named.sinks.archive?.options as { dir: string }).dir, '/calls');
  assert.equal(loadConfig({}).spool.dir, 'data/spool/callsync', 'the defaults as before');
});

test('ARCHIVE_S3_BUCKET alone archives every call with a transcript or a summary to S3', () => {
  const config = loadConfig({
    ARCHIVE_S3_BUCKET: 'calls',
    ARCHIVE_S3_PREFIX: 'acme/',
    S3_ENDPOINT: 'http://127.0.0.1:9000',
    S3_FORCE_PATH_STYLE: 'true',
  });
  const options = config.sinks.archive?.options as Record<string, unknown>;
  assert.equal(options.bucket, 'calls');
  assert.equal(options.prefix, 'acme/');
  assert.equal(options.forcePathStyle, true);
  assert.deepEqual(sinksFor(config.routes, sampleCall('t')), ['archive']);
  const summaryOnly = sampleCall('s', { patch: (p) => delete p.assist.transcription });
  assert.deepEqual(sinksFor(config.routes, summaryOnly), ['archive']);
  const bare = sampleCall('b', { patch: (p) => (p.assist = null) });
  assert.deepEqual(sinksFor(config.routes, bare), []);
});

test('a config file defines sinks and routes, with ${ENV} interpolation', () => {
  const config = withFile(
    `
sinks:
  cold-storage:
    type: archive
    bucket: \${BUCKET}
    prefix: \${PREFIX:-calls/}
routes:
  - name: appointments
    when: { source: ai-agent, direction: in, topics: [Appointment], hasTranscript: true }
    to: cold-storage
  - when: [{ agent: vip-agent }, { outcome: missed }]
    to: [cold-storage]
retry: { attempts: 3, backoffMs: 200 }
`,
    { BUCKET: 'acme-calls' },
  );
  assert.deepEqual(Object.keys(config.sinks), ['cold-storage']);
  assert.equal((config.sinks['cold-storage']?.options as { bucket: string }).bucket, 'acme-calls');
  assert.equal((config.sinks['cold-storage']?.options as { prefix: string }).prefix, 'calls/');
  assert.equal(config.retry.attempts, 3);
  assert.equal(config.retry.backoffMs, 200);
  assert.deepEqual(sinksFor(config.routes, sampleCall('x', { agentId: 'someone' })), ['cold-storage']);
  const outbound = sampleCall('y', { agentId: 'someone', patch: (p) => (p.call.direction = 'out') });
  assert.deepEqual(sinksFor(config.routes, outbound), []);
  const vip = sampleCall('z', { agentId: 'vip-agent', patch: (p) => (p.call.direction = 'out') });
  assert.deepEqual(sinksFor(config.routes, vip), ['cold-storage']);
});

test('every bad key is reported at once, with what was expected', () => {
  const problems = configProblems(() =>
    withFile(
      `
sinks:
  store:
    type: archive
    bucket: 42
    colour: blue
  mystery:
    type: fax-machine
routes:
  - when: { direction: sideways, topic: x }
    to: [nowhere]
  - to: [store]
    extra: 1
`,
      { PORT: 'eighty', TRUST_PROXY_HOPS: '-1', WEBHOOK_ALLOWED_IPS: '10.0.0.0/40,not-an-ip' },
    ),
  );
  const text = problems.join('\n');
  assert.match(text, /PORT: expected a whole number/);
  assert.match(text, /TRUST_PROXY_HOPS/);
  assert.match(text, /sinks\.store\.bucket/);
  assert.match(text, /sinks\.store.*colour/);
  assert.match(text, /sinks\.mystery\.type: unknown sink type "fax-machine"/);
  assert.match(text, /routes\[0\]\.when/);
  assert.match(text, /routes\[1\].*extra/);
  assert.match(text, /WEBHOOK_ALLOWED_IPS: "10\.0\.0\.0\/40"/);
  assert.match(text, /WEBHOOK_ALLOWED_IPS: "not-an-ip"/);
  assert.ok(problems.length >= 8, text);
});

test('unset ${VARS}, unknown route targets, unreadable files and bad YAML are reported', () => {
  const missingVar = configProblems(() => withFile('sinks:\n  a:\n    type: archive\n    bucket: ${NOPE}\n'));
  assert.match(missingVar.join('\n'), /sinks\.a\.bucket: environment variable NOPE is not set/);
  const noSink = configProblems(() => withFile('routes:\n  - to: [ghost]\n'));
  assert.match(noSink.join('\n'), /routes\[0\]\.to: no sink named "ghost"/);
  const badYaml = configProblems(() => withFile('sinks: [unclosed'));
  assert.match(badYaml.join('\n'), /not valid YAML/);
  // The parser quotes the offending line after its message: not repeated, a secret may be on it.
  const secretLine = configProblems(() =>
    withFile('sinks:\n  hs:\n    type: hubspot\n    accessToken: pat-na1-NOT-TO-BE-PRINTED: x\n'),
  ).join('\n');
  assert.match(secretLine, /not valid YAML: .* at line 4, column \d+$/m);
  assert.doesNotMatch(secretLine, /NOT-TO-BE-PRINTED/);
  const unreadable = configProblems(() => loadConfig({ CALLSYNC_CONFIG: '/nonexistent/callsync.yaml' }));
  assert.match(unreadable.join('\n'), /cannot read/);
});

test('the sink name "poller" is refused: its state would share the channel poller\'s keys', () => {
  const problems = configProblems(() => withFile('sinks:\n  poller:\n    type: archive\n'));
  assert.match(problems.join('\n'), /the sink name "poller" is reserved/);
});

test('shared credential settings come in pairs; "*" opens the allow list with a warning', () => {
  assert.match(configProblems(() => loadConfig({ WEBHOOK_AUTH_HEADER: 'x-token' })).join('\n'), /WEBHOOK_AUTH_TOKENS/);
  const config = loadConfig({ WEBHOOK_AUTH_HEADER: 'X-Token', WEBHOOK_AUTH_TOKENS: 'a, b', WEBHOOK_ALLOWED_IPS: '*' });
  assert.equal(config.webhook.authHeader, 'x-token');
  assert.deepEqual(config.webhook.authTokens, ['a', 'b']);
  assert.equal(config.webhook.allowedIps, '*');
  assert.match(config.warnings.join('\n'), /any address/);
});

test('a {hash-tag} queue prefix is accepted (Redis Cluster)', () => {
  assert.equal(loadConfig({ QUEUE_PREFIX: '{callsync}' }).redis.prefix, '{callsync}');
});

test('routes, CRM outcome maps and the README take their value sets from the model, and only those', () => {
  const list = (values: readonly string[]) => `[${values.join(', ')}]`;
  const allOutcomes = (to: string) => `{ ${OUTCOMES.map((o) => `${o}: ${to}`).join(', ')} }`;
  const config = withFile(
    `
sinks:
  hs: { type: hubspot, accessToken: t, statusMap: ${allOutcomes('BUSY')} }
  pd: { type: pipedrive, apiToken: t, outcomeMap: ${allOutcomes('busy')} }
routes:
  - when: { source: ${list(CALL_SOURCES)}, direction: ${list(DIRECTIONS)}, outcome: ${list(OUTCOMES)} }
    to: [hs, pd]
`,
  );
  assert.deepEqual(config.routes[0]?.when[0]?.outcome, [...OUTCOMES]);
  assert.deepEqual(config.routes[0]?.when[0]?.source, [...CALL_SOURCES]);
  assert.deepEqual(config.routes[0]?.when[0]?.direction, [...DIRECTIONS]);

  // A value outside the model's sets is refused by each of them.
  const text = configProblems(() =>
    withFile(`
sinks:
  hs: { type: hubspot, accessToken: t, statusMap: { voicemail: BUSY } }
  pd: { type: pipedrive, apiToken: t, outcomeMap: { voicemail: busy } }
routes:
  - { when: { source: fax }, to: hs }
  - { when: { direction: sideways }, to: hs }
  - { when: { outcome: voicemail }, to: hs }
`),
  ).join('\n');
  for (const field of [
    'sinks.hs.statusMap',
    'sinks.pd.outcomeMap',
    'routes[0].when',
    'routes[1].when',
    'routes[2].when',
  ]) {
    assert.ok(text.includes(field), `${field} refused:\n${text}`);
  }

  // The README's list of route conditions names the same values (a new outcome is documented too).
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const conditions = /Conditions in `when`:([\s\S]*?)\n\n/.exec(readme)?.[1] ?? '';
  const documented = (name: string) =>
    [...(new RegExp(`\`${name}\` \\(([^)]*)\\)`).exec(conditions)?.[1] ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1]);
  assert.deepEqual(documented('outcome'), [...OUTCOMES]);
  assert.deepEqual(documented('source'), [...CALL_SOURCES]);
  assert.deepEqual(documented('direction'), [...DIRECTIONS]);
});

test('TRUST_PROXY_HOPS without TRUSTED_PROXIES is an error naming both (a forged X-Forwarded-For got in)', () => {
  for (const hops of ['1', '3']) {
    const problems = configProblems(() => loadConfig({ TRUST_PROXY_HOPS: hops }));
    assert.equal(problems.length, 1, problems.join('\n'));
    assert.match(problems[0]!, /^TRUST_PROXY_HOPS: .*TRUSTED_PROXIES/);
  }
  // 0 trusts nobody: harmless alone (the compose file passes it by default).
  assert.equal(loadConfig({ TRUST_PROXY_HOPS: '0' }).webhook.trustProxyHops, 0);
  const config = loadConfig({
    TRUST_PROXY_HOPS: '2',
    TRUSTED_PROXIES: ' 10.0.0.0/8, 2001:db8::/32 ,192.0.2.7,::ffff:198.51.100.0/120',
  });
  assert.equal(config.webhook.trustProxyHops, 2);
  assert.deepEqual(config.webhook.trustedProxies, [
    '10.0.0.0/8',
    '2001:db8::/32',
    '192.0.2.7',
    '::ffff:198.51.100.0/120',
  ]);
  // Without hops every trusted proxy in the chain is stepped through.
  assert.equal(loadConfig({ TRUSTED_PROXIES: '10.0.0.1' }).webhook.trustProxyHops, undefined);
});

test('TRUSTED_PROXIES entries must be IPs or CIDRs, never "*"', () => {
  const problems = configProblems(() => loadConfig({ TRUSTED_PROXIES: '10.0.0.0/33,proxy.local,*' }));
  const text = problems.join('\n');
  assert.match(text, /TRUSTED_PROXIES: "\*" would believe X-Forwarded-For from anyone/);
  const bad = configProblems(() => loadConfig({ TRUSTED_PROXIES: '10.0.0.0/33,proxy.local' })).join('\n');
  assert.match(bad, /TRUSTED_PROXIES: "10\.0\.0\.0\/33" is not an IP address or CIDR/);
  assert.match(bad, /TRUSTED_PROXIES: "proxy\.local" is not an IP address or CIDR/);
});

test('request timeout, headers timeout and connection cap: set, checked, headers within the request', () => {
  const config = loadConfig({
    WEBHOOK_REQUEST_TIMEOUT_MS: '5000',
    HTTP_HEADERS_TIMEOUT_MS: '2000',
    HTTP_MAX_CONNECTIONS: '50',
  });
  assert.equal(config.http.requestTimeoutMs, 5000);
  assert.equal(config.http.headersTimeoutMs, 2000);
  assert.equal(config.http.maxConnections, 50);
  const text = configProblems(() => loadConfig({ WEBHOOK_REQUEST_TIMEOUT_MS: '0', HTTP_MAX_CONNECTIONS: 'many' })).join(
    '\n',
  );
  assert.match(text, /WEBHOOK_REQUEST_TIMEOUT_MS: expected a whole number >= 1/);
  assert.match(text, /HTTP_MAX_CONNECTIONS: expected a whole number >= 1/);
  // Node refuses a headers timeout above the request timeout (or silently swaps them when set later).
  const order = configProblems(() =>
    loadConfig({ WEBHOOK_REQUEST_TIMEOUT_MS: '5000', HTTP_HEADERS_TIMEOUT_MS: '6000' }),
  );
  assert.match(order.join('\n'), /HTTP_HEADERS_TIMEOUT_MS: 6000 is longer than WEBHOOK_REQUEST_TIMEOUT_MS/);
});

test('WEBHOOK_BODY_WAIT_MS: 2 s by default (half a shorter request timeout), 0 allowed, below the request timeout', () => {
  assert.equal(loadConfig({}).webhook.bodyWaitMs, 2000);
  // A short request timeout set before this variable existed stays valid: the default wait fits in it.
  assert.equal(
    loadConfig({ WEBHOOK_REQUEST_TIMEOUT_MS: '1000', HTTP_HEADERS_TIMEOUT_MS: '500' }).webhook.bodyWaitMs,
    500,
  );
  assert.equal(loadConfig({ WEBHOOK_BODY_WAIT_MS: '0' }).webhook.bodyWaitMs, 0);
  assert.match(
    configProblems(() => loadConfig({ WEBHOOK_BODY_WAIT_MS: '-1' })).join('\n'),
    /WEBHOOK_BODY_WAIT_MS: expected a whole number >= 0/,
  );
  const over = configProblems(() => loadConfig({ WEBHOOK_REQUEST_TIMEOUT_MS: '5000', WEBHOOK_BODY_WAIT_MS: '5000' }));
  assert.match(over.join('\n'), /WEBHOOK_BODY_WAIT_MS: 5000 must be below WEBHOOK_REQUEST_TIMEOUT_MS \(5000\)/);
});

test('one pass: environment, file keys, sink credentials and routes are reported together, with the expected value', () => {
  const problems = configProblems(() =>
    withFile(
      `
sinks:
  crm:
    type: hubspot
  texts:
    type: sms
    smsId: s0
    message: "Sorry we missed your call"
  mail: { type: email, to: team@example.com }
  hook: { type: webhook, urls: ["https://crm.example.com/hook"] }
routes:
  - when: { direction: inbound }
    to: [crm, texts, mail, hook]
colour: blue
`,
      { JOB_ATTEMPTS: 'lots', LOG_LEVEL: 'loud' },
    ),
  );
  const text = problems.join('\n');
  // A bad environment value, with what was given and what is expected.
  assert.match(text, /^JOB_ATTEMPTS: expected a whole number >= 1, got "lots"$/m);
  assert.match(text, /^LOG_LEVEL: "loud" — use fatal, error, warn, info, debug, trace or silent$/m);
  // An unknown key of the file.
  assert.match(text, /^colour: unknown key — the config file has sinks, routes, retry$/m);
  // Credentials the sink type needs, named, although the options themselves are valid.
  assert.match(text, /^sinks\.crm \(hubspot\): no access token: set HUBSPOT_ACCESS_TOKEN/m);
  assert.match(text, /^sinks\.texts \(sms\): needs the platform API to send: set TELEPHONY_API_URL/m);
  assert.match(text, /^sinks\.mail \(email\): needs an SMTP server: set SMTP_URL/m);
  assert.match(text, /^sinks\.mail \(email\): needs a sender: set SMTP_FROM/m);
  assert.match(text, /^sinks\.hook \(webhook\): no signing secret: set CRM_WEBHOOK_SECRET/m);
  // A route condition outside its value set.
  assert.match(text, /^routes\[0\]\.when\.direction: "inbound" — use in or out$/m);
  assert.equal(problems.length, 9, text);
});

test('one pass: a value in a list, a list of conditions and a bad file part each point at their place', () => {
  const text = configProblems(() =>
    withFile(`
sinks:
  a: { type: archive }
  b: { type: archive, sse: AES128 }
  c: notes
routes:
  - { when: { direction: [in, sideways] }, to: a }
  - { when: [{ outcome: missed }, { hasSummary: "yes" }], to: a }
  - { to: [a, ghost] }
retry: { attempts: 0 }
`),
  ).join('\n');
  assert.match(text, /^routes\[0\]\.when\.direction\[1\]: "sideways" — use in or out$/m);
  assert.match(text, /^routes\[1\]\.when\[1\]\.hasSummary: expected boolean, got string$/m);
  assert.match(text, /^routes\[2\]\.to: no sink named "ghost" — use a, b or c$/m);
  assert.match(text, /^sinks\.b\.sse: "AES128" — use AES256, aws:kms or aws:kms:dsse$/m);
  assert.match(text, /^sinks\.c: expected the sink's options \(type: …\), got string$/m);
  assert.match(text, /^retry\.attempts: /m);
});

test('credentials from the environment satisfy a sink; the environment shortcut needs the same', () => {
  const file = `
sinks:
  crm: { type: hubspot }
  texts: { type: sms, message: "hi" }
routes:
  - to: [crm, texts]
`;
  const ok = withFile(file, {
    HUBSPOT_ACCESS_TOKEN: 'pat-test',
    TELEPHONY_API_URL: 'https://api.example.com/v2',
    TELEPHONY_ACCESS_TOKEN: 'at',
    TELEPHONY_SMS_ID: 's0',
  });
  assert.deepEqual(Object.keys(ok.sinks).sort(), ['crm', 'texts']);
  // SMS without its extension id, with the API configured: only that is missing.
  const noSmsId = configProblems(() =>
    withFile(file, {
      HUBSPOT_ACCESS_TOKEN: 'pat-test',
      TELEPHONY_API_URL: 'https://api.example.com/v2',
      TELEPHONY_ACCESS_TOKEN: 'at',
    }),
  );
  assert.deepEqual(noSmsId, ["sinks.texts (sms): needs an SMS extension id: set TELEPHONY_SMS_ID or the sink's smsId"]);
  // The API half-configured: its own problem, not a second "set TELEPHONY_API_URL" from the sink.
  const halfApi = configProblems(() =>
    withFile(file, {
      HUBSPOT_ACCESS_TOKEN: 'pat-test',
      TELEPHONY_API_URL: 'https://api.example.com/v2',
      TELEPHONY_SMS_ID: 's0',
    }),
  );
  assert.equal(halfApi.length, 1, halfApi.join('\n'));
  assert.match(halfApi[0]!, /TELEPHONY_API_URL is set but no credentials/);
  // Environment shortcuts are checked the same way: SMTP_URL + NOTIFY_EMAIL_TO without a sender.
  const mail = configProblems(() =>
    loadConfig({ SMTP_URL: 'smtp://mail.example.com:587', NOTIFY_EMAIL_TO: 'team@example.com' }),
  );
  assert.deepEqual(mail, [
    'environment shortcut for sink "email" (email): needs a sender: set SMTP_FROM or the sink\'s from',
  ]);
});

test('each sink type declares the variables it reads in the one schema, values checked', () => {
  const variables = new Set(Object.keys(envSchema.shape));
  for (const name of [
    'HUBSPOT_ACCESS_TOKEN',
    'HUBSPOT_API_URL',
    'HUBSPOT_CREATE_CONTACTS',
    'PIPEDRIVE_API_TOKEN',
    'PIPEDRIVE_API_URL',
    'CRM_WEBHOOK_URL',
    'CRM_WEBHOOK_SECRET',
    'SMTP_URL',
    'SMTP_FROM',
    'NOTIFY_EMAIL_TO',
    'NOTIFY_TIME_ZONE',
    'TELEPHONY_SMS_ID',
    'TELEPHONY_API_URL',
    'TELEPHONY_TOKEN',
    'PHONE_DEFAULT_REGION',
    'ARCHIVE_S3_BUCKET',
    'ARCHIVE_DIR',
  ]) {
    assert.ok(variables.has(name), `${name} is in the schema`);
  }
  for (const type of sinkTypes.values()) {
    for (const name of Object.keys(type.env ?? {}))
      assert.ok(variables.has(name), `${type.type} reads ${name}, which is in the schema`);
  }
  const text = configProblems(() =>
    loadConfig({
      HUBSPOT_CREATE_CONTACTS: 'maybe',
      HUBSPOT_API_URL: 'api.hubapi.com',
      PHONE_DEFAULT_REGION: 'XX',
      SMTP_URL: 'mail.example.com',
      NOTIFY_EMAIL_TO: 'team',
      NOTIFY_TIME_ZONE: 'Mars/Olympus',
      CRM_WEBHOOK_SECRET: 'not-a-whsec-secret-value',
      TELEPHONY_OAUTH_CLIENT_AUTH: 'header',
    }),
  ).join('\n');
  assert.match(text, /^HUBSPOT_CREATE_CONTACTS: expected true or false, got "maybe"$/m);
  assert.match(text, /^HUBSPOT_API_URL: expected an http\(s\) URL/m);
  assert.match(text, /^PHONE_DEFAULT_REGION: "XX" — expected an ISO 3166 country code/m);
  assert.match(text, /^SMTP_URL: expected smtp:\/\//m);
  assert.match(text, /^NOTIFY_EMAIL_TO: expected e-mail addresses/m);
  assert.match(text, /^NOTIFY_TIME_ZONE: expected an IANA time zone/m);
  assert.match(text, /^CRM_WEBHOOK_SECRET: expected whsec_ secrets/m);
  assert.match(text, /^TELEPHONY_OAUTH_CLIENT_AUTH: "header" — use basic or post$/m);
  assert.doesNotMatch(text, /not-a-whsec-secret-value/, 'a bad secret is not echoed');
});

/** The warning loadConfig gives when no route reaches an archive sink, as operators read it at start. */
const NO_ARCHIVE_WARNING =
  'no route sends calls to an archive sink: calls are not archived (add a sink of type archive and a route to it, or set ARCHIVE_S3_BUCKET)';

test('with a config file the file lists every sink: no implicit archive, and a warning when nothing archives calls', () => {
  const crmOnly = withFile('sinks:\n  crm: { type: hubspot, accessToken: t }\nroutes:\n  - to: crm\n');
  assert.deepEqual(Object.keys(crmOnly.sinks), ['crm']);
  assert.ok(crmOnly.warnings.includes(NO_ARCHIVE_WARNING), crmOnly.warnings.join('\n'));
  // An archive sink that no route reaches does not count.
  const unrouted = withFile(
    'sinks:\n  store: { type: archive }\n  crm: { type: hubspot, accessToken: t }\nroutes:\n  - to: crm\n',
  );
  assert.ok(unrouted.warnings.includes(NO_ARCHIVE_WARNING));
  // Archiving through the file, through ARCHIVE_S3_BUCKET, or without a file: no warning.
  const routed = withFile('sinks:\n  store: { type: archive }\nroutes:\n  - to: store\n');
  assert.ok(!routed.warnings.includes(NO_ARCHIVE_WARNING));
  const bucket = withFile('sinks:\n  crm: { type: hubspot, accessToken: t }\nroutes:\n  - to: crm\n', {
    ARCHIVE_S3_BUCKET: 'calls',
  });
  assert.deepEqual(Object.keys(bucket.sinks).sort(), ['archive', 'crm']);
  assert.ok(!bucket.warnings.includes(NO_ARCHIVE_WARNING));
  assert.ok(!loadConfig({}).warnings.includes(NO_ARCHIVE_WARNING));
});

test('an archive sink of the config file reads S3_ENDPOINT, S3_FORCE_PATH_STYLE, AWS_REGION and completes a credential pair from AWS_*', () => {
  const env = {
    S3_ENDPOINT: 'http://127.0.0.1:9000',
    S3_FORCE_PATH_STYLE: 'true',
    AWS_REGION: 'eu-central-1',
    AWS_ACCESS_KEY_ID: 'AKIAEXAMPLE',
    AWS_SECRET_ACCESS_KEY: 'env-secret',
  };
  const config = withFile(
    'sinks:\n  store: { type: archive, bucket: calls }\n  half: { type: archive, bucket: other, accessKeyId: AKIAFILE }\nroutes:\n  - to: [store, half]\n',
    env,
  );
  assert.deepEqual(config.sinks.store?.options, {
    bucket: 'calls',
    region: 'eu-central-1',
    endpoint: 'http://127.0.0.1:9000',
    forcePathStyle: true,
    dir: './data/archive',
  });
  // Neither key in the file: the AWS SDK's chain reads AWS_* (with a session token) itself; one key: the other from the environment.
  assert.deepEqual(config.sinks.half?.options, {
    bucket: 'other',
    region: 'eu-central-1',
    endpoint: 'http://127.0.0.1:9000',
    forcePathStyle: true,
    accessKeyId: 'AKIAFILE',
    secretAccessKey: 'env-secret',
    dir: './data/archive',
  });
  const shown = describeConfig(config).join('\n');
  assert.match(shown, /"region":"eu-central-1","endpoint":"http:\/\/127\.0\.0\.1:9000","forcePathStyle":true/);
  assert.doesNotMatch(shown, /env-secret|us-east-1/);
  // What the file says wins over the environment.
  const own = withFile(
    'sinks:\n  store: { type: archive, bucket: calls, region: us-west-2, endpoint: "https://s3.example.com", forcePathStyle: false }\nroutes:\n  - to: [store]\n',
    env,
  );
  assert.deepEqual(own.sinks.store?.options, {
    bucket: 'calls',
    region: 'us-west-2',
    endpoint: 'https://s3.example.com',
    forcePathStyle: false,
    dir: './data/archive',
  });
  // A folder archive takes no S3 settings.
  const folder = withFile('sinks:\n  store: { type: archive, dir: /tmp/a }\nroutes:\n  - to: [store]\n', env);
  assert.deepEqual(folder.sinks.store?.options, { region: 'us-east-1', forcePathStyle: false, dir: '/tmp/a' });
});

test('one pass: a route that is wrong names its unknown sinks too; a sink with several problems shows them all', () => {
  const problems = configProblems(() =>
    withFile(`
sinks:
  archive: { type: archive }
  crm: { type: hubspot, colour: blue }
  store: { type: archive, bucket: b, sse: AES128, accessKeyId: AKIAONLY }
routes:
  - when: { direction: sideways }
    to: [archive, nowhere]
  - to: [archive, elsewhere]
`),
  );
  const text = problems.join('\n');
  assert.match(text, /^routes\[0\]\.when\.direction: "sideways" — use in or out$/m);
  assert.match(text, /^routes\[0\]\.to: no sink named "nowhere" — use archive, crm or store$/m);
  assert.match(text, /^routes\[1\]\.to: no sink named "elsewhere" — use archive, crm or store$/m);
  assert.match(text, /^sinks\.crm\.colour: unknown key$/m);
  assert.match(text, /^sinks\.crm \(hubspot\): no access token/m);
  assert.match(text, /^sinks\.store\.sse: "AES128"/m);
  assert.match(text, /^sinks\.store \(archive\): accessKeyId and secretAccessKey .* go together/m);
  assert.equal(problems.length, 7, text);
});

test('a CRM token the sink would refuse at start is a configuration problem: whitespace inside, or only whitespace', () => {
  const env = configProblems(() => loadConfig({ HUBSPOT_ACCESS_TOKEN: 'pat-na1 abc' }));
  assert.deepEqual(env, [
    'environment shortcut for sink "hubspot" (hubspot): the access token (HUBSPOT_ACCESS_TOKEN) contains spaces, line breaks or non-ASCII characters; copy it again',
  ]);
  const file = configProblems(() =>
    withFile(`
sinks:
  spaced: { type: hubspot, accessToken: "pat-na1 abc" }
  broken: { type: hubspot, accessToken: "pat-na1\\nabc" }
  umlaut: { type: hubspot, accessToken: "pat-na1-äbc" }
  blank: { type: hubspot, accessToken: "   " }
routes:
  - to: [spaced, broken, umlaut, blank]
`),
  );
  const text = file.join('\n');
  for (const name of ['spaced', 'broken', 'umlaut'])
    assert.match(
      text,
      new RegExp(
        `^sinks\\.${name} \\(hubspot\\): the access token \\(the sink's accessToken\\) contains spaces, line breaks`,
        'm',
      ),
    );
  assert.match(text, /^sinks\.blank \(hubspot\): no access token: set HUBSPOT_ACCESS_TOKEN/m);
  assert.equal(file.length, 4, text);
  // Around the token, whitespace is trimmed (a line break pasted after it) as the sink does.
  const padded = withFile('sinks:\n  crm: { type: hubspot, accessToken: " pat-na1-abc\\n" }\nroutes:\n  - to: crm\n');
  assert.equal(padded.sinks.crm?.type, 'hubspot');
});

test('a Pipedrive token with a line break or space inside is a configuration problem too (it would fail every request)', () => {
  const env = configProblems(() => loadConfig({ PIPEDRIVE_API_TOKEN: 'abc def' }));
  assert.deepEqual(env, [
    'environment shortcut for sink "pipedrive" (pipedrive): the API token (PIPEDRIVE_API_TOKEN) contains spaces, line breaks or non-ASCII characters; copy it again',
  ]);
  const file = configProblems(() =>
    withFile(
      'sinks:\n  crm: { type: pipedrive, apiToken: "abc\\ndef" }\n  blank: { type: pipedrive, apiToken: " " }\nroutes:\n  - to: [crm, blank]\n',
    ),
  );
  assert.deepEqual(file, [
    "sinks.crm (pipedrive): the API token (the sink's apiToken) contains spaces, line breaks or non-ASCII characters; copy it again",
    "sinks.blank (pipedrive): no API token: set PIPEDRIVE_API_TOKEN or the sink's apiToken",
  ]);
});

test("each sink type's settings are the parsed values of the variables it declares, and nothing else", () => {
  const config = loadConfig({
    HUBSPOT_ACCESS_TOKEN: '  pat-token\n',
    PHONE_DEFAULT_REGION: 'at',
    SMTP_URL: 'smtp://mail.example.com:587',
    PRIVACY_HMAC_SECRET: 'k',
    TELEPHONY_SMS_ID: 's0',
  });
  const hubspot = config.sinkSettings.hubspot!;
  assert.equal(hubspot.HUBSPOT_ACCESS_TOKEN, 'pat-token');
  assert.equal(hubspot.PHONE_DEFAULT_REGION, 'AT');
  assert.equal(hubspot.SMTP_URL, undefined);
  assert.equal(hubspot.PRIVACY_HMAC_SECRET, undefined);
  assert.deepEqual(config.sinkSettings.sms, { TELEPHONY_SMS_ID: 's0', PRIVACY_HMAC_SECRET: 'k' });
  for (const type of sinkTypes.values())
    assert.deepEqual(
      Object.keys(config.sinkSettings[type.type]!).sort(),
      Object.keys(type.env ?? {}).sort(),
      type.type,
    );
});

test('CALL_TIMELINE: on by default, off switches the call timelines off, anything else is refused', () => {
  assert.equal(loadConfig({}).timeline.enabled, true);
  assert.equal(loadConfig({ CALL_TIMELINE: 'on' }).timeline.enabled, true);
  assert.equal(loadConfig({ CALL_TIMELINE: 'off' }).timeline.enabled, false);
  assert.throws(() => loadConfig({ CALL_TIMELINE: 'no' }), /CALL_TIMELINE/);
});

test('a bad URL variable is named, never echoed with its credentials (user info, query)', () => {
  const cases: Record<string, string> = {
    HUBSPOT_API_URL: 'api.hubapi.com/?hapikey=s3cr3t',
    TELEPHONY_API_URL: 'ftp://user:s3cr3t@api.example.com/v2',
    PIPEDRIVE_API_URL: 'pipedrive.com/v1?api_token=s3cr3t',
    ADMIN_ORIGIN: 'https://admin:s3cr3t@ops.example.com',
  };
  for (const [name, value] of Object.entries(cases)) {
    const problems = configProblems(() => loadConfig({ [name]: value }));
    assert.equal(problems.length, 1, problems.join('; '));
    assert.ok(problems[0]!.startsWith(`${name}: expected`), problems[0]);
    assert.doesNotMatch(problems[0]!, /s3cr3t/, problems[0]);
  }
  // What helps find the mistake is still shown: the missing scheme.
  assert.match(configProblems(() => loadConfig({ PIPEDRIVE_API_URL: 'pipedrive.com' }))[0]!, /got "pipedrive\.com"$/);
});

test('numbers are decimal digits: 0x10, 1e3, 0b1 are refused, naming the variable', () => {
  for (const [name, value] of [
    ['PORT', '0x10'],
    ['WORKER_CONCURRENCY', '1e3'],
    ['INBOUND_SHARDS', '0b1'],
    ['OPS_PORT', '0o17'],
    ['COMPLETED_JOB_RETENTION_SECONDS', '-5'],
  ] as const) {
    const problems = configProblems(() => loadConfig({ [name]: value }));
    assert.ok(
      problems.some((p) => p.startsWith(`${name}: expected`) && p.includes(`got "${value}"`)),
      problems.join('; '),
    );
  }
  assert.equal(loadConfig({ PORT: ' 3001 ' }).http.port, 3001);
  assert.equal(loadConfig({ PORT: '0' }).http.port, 0);
});

test('an OTLP endpoint or an S3 endpoint that is no http(s) URL is refused; a short PRIVACY_HMAC_SECRET is warned about', () => {
  // Before: both passed check-config.
  assert.match(
    configProblems(() => loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'notaurl' }))[0]!,
    /^OTEL_EXPORTER_OTLP_ENDPOINT: expected an http\(s\) URL/,
  );
  assert.match(
    configProblems(() => loadConfig({ ARCHIVE_S3_BUCKET: 'b', S3_ENDPOINT: 's3:x@' }))[0]!,
    /endpoint: expected an http\(s\) URL/,
  );
  assert.equal(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).warnings.length, 0);
  const short = loadConfig({ PRIVACY_HMAC_SECRET: 'short' }).warnings;
  assert.equal(short.length, 1);
  assert.match(short[0]!, /^PRIVACY_HMAC_SECRET is shorter than 16 characters/);
  assert.doesNotMatch(short[0]!, /short\b(?! a key)/, 'the key itself is not repeated');
  assert.deepEqual(loadConfig({ PRIVACY_HMAC_SECRET: 'x'.repeat(32) }).warnings, []);
});

test("the configuration's secrets are kept out of every remote's text, whatever their shape", async () => {
  const { redactRemoteText } = await import('../src/redact.js');
  const hubspot = 'pat-na1-0b7c2d4e-5f6a-4b8c-9d0e-1f2a3b4c5d6e'; // a UUID after the prefix: kept as an id before
  const pipedrive = '0123456789abcdef0123456789abcdef01234567'; // 40 hex: kept as an id before
  const header = 'x-key-short1';
  const redisPassword = 'r3dis-pa55!';
  withFile(
    'sinks:\n  hook:\n    type: webhook\n    endpoints: [{ name: a, url: "https://example.com/h", headers: { X-Api-Key: "' +
      header +
      '" } }]\nroutes:\n  - to: [hook]\n',
    {
      HUBSPOT_ACCESS_TOKEN: hubspot,
      PIPEDRIVE_API_TOKEN: pipedrive,
      PIPEDRIVE_COMPANY_DOMAIN: 'acme',
      CRM_WEBHOOK_SECRET: `whsec_${Buffer.alloc(32, 1).toString('base64')}`,
      REDIS_URL: `redis://:${encodeURIComponent(redisPassword)}@127.0.0.1:6379`,
    },
  );
  const echoed = redactRemoteText(
    `invalid token ${hubspot}; api_token ${pipedrive} unknown; header X-Api-Key: ${header}; auth ${encodeURIComponent(redisPassword)} refused`,
  );
  for (const secret of [hubspot, pipedrive, header, redisPassword, encodeURIComponent(redisPassword)])
    assert.ok(!echoed.includes(secret), `${secret} in: ${echoed}`);
  assert.match(echoed, /^invalid token \[redacted\]; api_token \[redacted\] unknown; header X-Api-Key: \[redacted\]/);
});
