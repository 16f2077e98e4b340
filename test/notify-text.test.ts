// Pure helpers of the notification sinks (quiet hours across midnight and DST, clean SMS cuts,
// templates) and the example configurations of the README.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { loadConfig } from '../src/config/index.js';
import { describe, test } from 'node:test';
import { textLength, truncateText } from '../src/sinks/notify/message.js';
import { quietHoursEnd } from '../src/sinks/notify/time.js';
import { escapeHtml, renderTemplate, templateFields } from '../src/sinks/template.js';

describe('quiet hours', () => {
  const berlin = { start: '21:00', end: '08:00', timeZone: 'Europe/Berlin' };
  const end = (iso: string, q = berlin) => quietHoursEnd(new Date(iso), q)?.toISOString() ?? null;

  test('across midnight: before, inside (evening and morning), at the end', () => {
    assert.equal(end('2026-04-08T18:59:00Z'), null); // 20:59
    assert.equal(end('2026-04-08T19:00:00Z'), '2026-04-09T06:00:00.000Z'); // 21:00 -> 08:00 next day
    assert.equal(end('2026-04-09T03:30:00Z'), '2026-04-09T06:00:00.000Z'); // 05:30 -> 08:00 same day
    assert.equal(end('2026-04-09T06:00:00Z'), null); // 08:00
  });

  test('the end is found in local time across DST changes', () => {
    assert.equal(end('2026-03-28T22:00:00Z'), '2026-03-29T06:00:00.000Z'); // night the clocks go forward
    assert.equal(end('2026-10-24T22:00:00Z'), '2026-10-25T07:00:00.000Z'); // night the clocks go back
  });

  test('within one day, and in another zone', () => {
    const ny = { start: '00:00', end: '07:00', timeZone: 'America/New_York' };
    assert.equal(end('2026-04-08T05:00:00Z', ny), '2026-04-08T11:00:00.000Z'); // 01:00 EDT -> 07:00 EDT
    assert.equal(end('2026-04-08T12:00:00Z', ny), null);
  });
});

describe('SMS cut', () => {
  test('short texts stay; long ones end at a word with an ellipsis, never inside a character', () => {
    assert.equal(truncateText('Hello there', 20), 'Hello there');
    assert.equal(truncateText('We moved your appointment to Friday, 9:00, see you then', 40), 'We moved your appointment to Friday…');
    const emoji = `${'👍🏽'.repeat(30)}`;
    const cut = truncateText(emoji, 10);
    assert.equal(cut, `${'👍🏽'.repeat(9)}…`);
    assert.ok(truncateText('x'.repeat(100), 20).length === 20);
  });
});

describe('text length', () => {
  test('counts user-perceived characters, with a shortcut for plain ASCII', () => {
    assert.equal(textLength('Thanks for calling.\tAgreed: a visit'), 35);
    assert.equal(textLength('two\nlines'), 9);
    assert.equal(textLength('a\r\nb'), 3, 'CR LF is one character');
    assert.equal(textLength('Grüße 👋🏽'), 7, 'an accented letter and an emoji with a skin tone count once');
    assert.equal(textLength('e\u0301'), 1, 'a letter with a combining accent counts once');
    assert.equal(textLength(''), 0);
  });
});

describe('templates', () => {
  test('fields are replaced, unknown ones are empty, only values are escaped', () => {
    assert.equal(renderTemplate('<b>{{ name }}</b> {{missing}}!', { name: 'A & B' }, { escape: escapeHtml }), '<b>A &amp; B</b> !');
    assert.equal(renderTemplate('{{list}} {{n}} {{obj.x}}', { list: ['a', 'b'], n: 3, obj: { x: 'y' } }), 'a, b 3 y');
    assert.deepEqual(templateFields('{{a}} {{ b }} {{a}}'), ['a', 'b']);
  });
});

describe('README examples', () => {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  /** The first YAML block after a heading. */
  const yamlAfter = (heading: string) => {
    const at = readme.indexOf(heading);
    assert.ok(at >= 0, `README has "${heading}"`);
    const block = /```yaml\n([\s\S]*?)```/.exec(readme.slice(at))?.[1];
    assert.ok(block, `a yaml block after "${heading}"`);
    return block;
  };
  // What the examples need besides the file: the platform API for the SMS rules (README's table says so).
  const env = {
    TELEPHONY_SMS_ID: 's0',
    TELEPHONY_API_URL: 'https://api.example.com/v2',
    TELEPHONY_ACCESS_TOKEN: 'at',
    ARCHIVE_BUCKET: 'calls',
    KMS_KEY_ID: 'key-1',
    SMTP_URL: 'smtp://127.0.0.1:2525',
  };

  test('the notification rules load as they are written', () => {
    const config = loadConfig({ CALLSYNC_CONFIG: 'rules.yaml', ...env }, { readFile: () => yamlAfter('### Example rules (ready to copy)') });
    assert.deepEqual(Object.values(config.sinks).map((s) => s.type).sort(), ['email', 'sms', 'sms']);
    assert.equal(config.routes.length, 3);
  });

  test('the sinks-and-routes example loads as it is written', () => {
    const config = loadConfig({ CALLSYNC_CONFIG: 'callsync.yaml', ...env }, { readFile: () => yamlAfter('### The config file: sinks and routes') });
    assert.equal(config.sinks.archive?.type, 'archive');
    assert.equal(config.routes.length, 2);
  });
});
