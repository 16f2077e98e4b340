// Password guessing at the operator's endpoints (issue 23, item 3), over a real port from several
// loopback addresses (127.0.0.2 … are loopback on Linux too): wrong passwords from one peer are
// throttled with a doubling wait (429, Retry-After, the spec's error body) at the login page and for
// Basic auth alike; the operator, from another address, still logs in; a guess spread over many
// addresses gets one try each once the account is under attack; nothing logged holds a password.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';

const PASSWORD = 'throttle-pass-5d2f9a';
const TOKEN = 'throttle-token-8e1b7c';
const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One request from the loopback address `from` (no keep-alive: every try is a new connection). */
function send(
  url: string,
  from: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: options.method ?? 'GET',
        headers: { connection: 'close', ...options.headers },
        localAddress: from,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

describe('login throttle', () => {
  let cs: OpsCallsync;
  let dir: string;
  let origin: string;
  const login = (from: string, password: string, username = 'admin', accept = 'application/json') =>
    send(`${cs.url}/admin/login`, from, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin, accept },
      body: new URLSearchParams({ username, password, next: '/admin/queues' }).toString(),
    });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-login-throttle-'));
    cs = await startOpsCallsync({ ARCHIVE_DIR: dir, ADMIN_PASSWORD: PASSWORD, ADMIN_TOKEN: TOKEN });
    origin = new URL(cs.url).origin;
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('a guessing peer is throttled at the login page (429, Retry-After, error body); the operator elsewhere logs in', async () => {
    const statuses: number[] = [];
    let throttled: Reply | undefined;
    for (let i = 0; i < 30; i++) {
      const res = await login('127.0.0.2', `guess-${i}`);
      statuses.push(res.status);
      if (res.status === 429) throttled ??= res;
    }
    assert.deepEqual(statuses.slice(0, 5), [401, 401, 401, 401, 401], 'the first wrong passwords are answered 401');
    assert.ok(statuses.filter((s) => s === 429).length >= 20, `then the peer waits: ${statuses.join(' ')}`);
    assert.ok(throttled);
    assert.ok(Number(throttled.headers['retry-after']) >= 1, 'Retry-After in seconds');
    const body = JSON.parse(throttled.body) as {
      errors: { status: number; title: string; detail: string; source: { pointer: string } }[];
    };
    assert.equal(body.errors[0]!.status, 429);
    assert.equal(body.errors[0]!.title, 'Too Many Requests');
    assert.match(body.errors[0]!.detail, /too many failed logins: try again in \d+ s/);

    // While it waits, even the right password is not checked from there: no oracle for the guesser.
    assert.equal((await login('127.0.0.2', PASSWORD)).status, 429);
    // A browser gets the page, with the same status and Retry-After.
    const page = await login('127.0.0.2', 'guess-html', 'admin', 'text/html');
    assert.equal(page.status, 429);
    assert.ok(page.headers['retry-after']);
    assert.match(page.body, /too many failed logins/);

    // No global lockout: the operator at another address gets in at once.
    const operator = await login('127.0.0.1', PASSWORD);
    assert.equal(operator.status, 303, operator.body);
    assert.match(String(operator.headers['set-cookie']), /callsync_session=/);

    // Logged, without a password.
    const lines = cs.logs.filter((l) => String(l.msg).startsWith('wrong credentials'));
    assert.ok(
      lines.some(
        (l) =>
          l.peer === '127.0.0.2' && l.account === 'admin' && l.via === 'login' && typeof l.throttledForMs === 'number',
      ),
      'the throttling is logged with the peer',
    );
    const logged = JSON.stringify(cs.logs);
    assert.ok(!logged.includes('guess-'), 'no tried password in the logs');
    assert.ok(!logged.includes(PASSWORD), 'no password in the logs');
  });

  test('Basic auth and tokens are throttled the same way; the right Basic credentials elsewhere pass', async () => {
    const statuses: number[] = [];
    let last: Reply | undefined;
    for (let i = 0; i < 12; i++) {
      last = await send(`${cs.url}/admin/queues/api/queues`, '127.0.0.3', {
        headers: { authorization: basic('admin', `basic-guess-${i}`) },
      });
      statuses.push(last.status);
    }
    assert.deepEqual(statuses.slice(0, 5), [401, 401, 401, 401, 401]);
    assert.equal(last?.status, 429, statuses.join(' '));
    assert.ok(Number(last?.headers['retry-after']) >= 1);
    assert.equal((JSON.parse(last!.body) as { errors: { status: number }[] }).errors[0]!.status, 429);

    const tokens: number[] = [];
    for (let i = 0; i < 8; i++)
      tokens.push(
        (
          await send(`${cs.url}/admin/queues/api/queues`, '127.0.0.4', {
            headers: { authorization: `Bearer wrong-${i}` },
          })
        ).status,
      );
    assert.equal(tokens.at(-1), 429, tokens.join(' '));

    assert.equal(
      (
        await send(`${cs.url}/admin/queues/api/queues`, '127.0.0.1', {
          headers: { authorization: basic('admin', PASSWORD) },
        })
      ).status,
      200,
    );
    assert.ok(!JSON.stringify(cs.logs).includes('basic-guess-'), 'no tried password in the logs');
  });

  test('a guess spread over many addresses: one try each once the account is under attack; a new address with the right password gets in', async () => {
    // Four failures from each of six addresses: beyond the account's 20 free failures.
    for (let a = 10; a < 16; a++) for (let i = 0; i < 4; i++) await login(`127.0.0.${a}`, `spread-${a}-${i}`);
    const fresh = await login('127.0.0.30', 'spread-fresh');
    assert.equal(fresh.status, 401, 'a new address gets its try');
    const again = await login('127.0.0.30', 'spread-fresh-2');
    assert.equal(again.status, 429, 'and then waits the account’s backoff');
    assert.equal(
      (await login('127.0.0.31', PASSWORD)).status,
      303,
      'the operator from an address that never failed gets in',
    );
  });
});
