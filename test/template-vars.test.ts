// One template variable set for every sink (src/sinks/template-vars.ts): CRM and notification
// templates accept the same names (old ones as aliases), render the same values, use one duration
// format, reject the same typos with the same list, and the README documents exactly that set.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import type { z } from 'zod';
import { hubspotSinkType } from '../src/sinks/crm/hubspot.js';
import { pipedriveSinkType } from '../src/sinks/crm/pipedrive.js';
import { callVars, renderHtmlBody, renderTitle } from '../src/sinks/crm/vars.js';
import { emailSinkType } from '../src/sinks/notify/email.js';
import { renderHtml, renderText } from '../src/sinks/notify/message.js';
import { smsSinkType } from '../src/sinks/notify/sms.js';
import { renderTemplate } from '../src/sinks/template.js';
import { withParts } from '../src/model/call.js';
import {
  formatDuration,
  partsReadBy,
  TEMPLATE_ALIASES,
  TEMPLATE_VARS,
  templateVars,
} from '../src/sinks/template-vars.js';
import { sampleCall } from './support/calls.js';

const crm = (call = sampleCall('tv-1')) => callVars(call, { defaultRegion: 'DE', archive: { enabled: false } });
const notify = (call = sampleCall('tv-1')) => templateVars(call, { timeZone: 'Europe/Berlin' });

/** Every template option of every sink type, as the config file would give it. */
const templateOptions: { sink: string; parse: (template: string) => unknown }[] = [
  { sink: 'hubspot titleTemplate', parse: (t) => hubspotSinkType.options.parse({ titleTemplate: t }) },
  { sink: 'hubspot bodyTemplate', parse: (t) => hubspotSinkType.options.parse({ bodyTemplate: t }) },
  { sink: 'pipedrive subjectTemplate', parse: (t) => pipedriveSinkType.options.parse({ subjectTemplate: t }) },
  { sink: 'pipedrive noteTemplate', parse: (t) => pipedriveSinkType.options.parse({ noteTemplate: t }) },
  { sink: 'sms message', parse: (t) => smsSinkType.options.parse({ smsId: 's0', message: t }) },
  { sink: 'email subject', parse: (t) => emailSinkType.options.parse({ to: 'team@example.com', subject: t }) },
  { sink: 'email text', parse: (t) => emailSinkType.options.parse({ to: 'team@example.com', text: t }) },
  { sink: 'email html', parse: (t) => emailSinkType.options.parse({ to: 'team@example.com', html: t }) },
];

const every = (names: readonly string[]) => names.map((n) => `{{${n}}}`).join(' ');

describe('one variable set', () => {
  test('every sink template accepts every variable and every old name', () => {
    const all = every([...TEMPLATE_VARS, ...Object.keys(TEMPLATE_ALIASES), 'answers.0.answer']);
    for (const { sink, parse } of templateOptions) assert.doesNotThrow(() => parse(all), sink);
  });

  test('a misspelt name is refused by every sink with the same message listing the variables', () => {
    const messages = templateOptions.map(({ sink, parse }) => {
      const err = (() => {
        try {
          parse('Hi {{caller}} {{sumary}} {{callr.x}}');
        } catch (e) {
          return e as z.ZodError;
        }
        return assert.fail(`${sink} accepted a misspelt name`);
      })();
      return err.issues[0]?.message ?? '';
    });
    assert.equal(new Set(messages).size, 1, messages.join('\n'));
    assert.equal(messages[0], `unknown field(s) {{sumary}}, {{callr.x}}; known: ${TEMPLATE_VARS.join(', ')}`);
  });

  test('an old name renders what its variable renders, in both kinds of sink', () => {
    const call = sampleCall('tv-alias', { patch: (p) => (p.call.direction = 'out') });
    for (const vars of [crm(call), notify(call)]) {
      for (const [old, name] of Object.entries(TEMPLATE_ALIASES)) {
        assert.equal(renderTemplate(`{{${old}}}`, vars), renderTemplate(`{{${name}}}`, vars), `{{${old}}}`);
      }
    }
    // The values themselves, so the aliases cannot agree on an empty string.
    const text = renderText('{{from}} -> {{to}}, other party {{counterpart}}, {{durationText}}', crm(call));
    assert.equal(text, '+492116355340 -> +4921155550100, other party +4921155550100, 2 min 15 s');
    assert.equal(renderText('{{agent}}', notify(call)), 'agent-1');
  });

  test('a CRM template and a notification template render the same text for the same call', () => {
    const template = [
      '{{direction}} ({{directionLabel}}) call from {{caller}} to {{callee}}, other party {{remote}}, {{outcome}}',
      '{{startedAt}} {{duration}} {{durationSec}} s, users {{users}}, agent {{agentId}}',
      '{{summary}}',
      '{{keyPoints}}',
      '{{keyPointsSection}}',
      '{{topics}} / {{topicsLine}}',
      '{{answersList}}',
      '{{recordingCount}} recordings, transcript {{hasTranscript}}',
    ].join('\n');
    const crmText = renderText(template, crm());
    assert.equal(crmText, renderText(template, notify()));
    assert.match(
      crmText,
      /^incoming \(Inbound\) call from \+492116355340 to \+4921155550100, other party \+492116355340, answered$/m,
    );
    assert.match(crmText, /^- /m, 'key points one per line');
    // The HTML renderers of both escape the same values.
    assert.equal(
      renderHtmlBody('<b>{{caller}}</b> {{summary}}', crm()),
      renderHtml('<b>{{caller}}</b> {{summary}}', '', notify()),
    );
  });

  test('local date and time: in the sink time zone for notifications, UTC for CRM sinks', () => {
    assert.equal(renderText('{{dateTime}} {{timeZone}}', notify()), '2026-04-08 12:00 Europe/Berlin');
    assert.equal(renderText('{{date}} {{time}} {{timeZone}}', crm()), '2026-04-08 10:00 UTC');
  });

  test('a withheld number reads "anonymous" in both sinks (also when the platform sent a marker)', () => {
    const call = sampleCall('tv-anon', { patch: (p) => (p.call.from = '<unknown>') });
    assert.equal(renderText('{{caller}} {{remote}} {{fromRaw}}', crm(call)), 'anonymous anonymous <unknown>');
    assert.equal(renderText('{{caller}} {{remote}} {{fromRaw}}', notify(call)), 'anonymous anonymous <unknown>');
  });

  test('CRM sinks read a national number in their default region; the raw value elsewhere', () => {
    const call = sampleCall('tv-national', { patch: (p) => (p.call.from = '0211 6355340') });
    assert.equal(renderTitle('{{caller}}', crm(call)), '+492116355340');
    assert.equal(renderText('{{caller}}', notify(call)), '0211 6355340');
  });
});

describe('one duration format', () => {
  test('`2 min 15 s` style for {{duration}} and the old {{durationText}}', () => {
    const cases: [number | null, string][] = [
      [0, '0 s'],
      [45, '45 s'],
      [45.4, '45 s'],
      [120, '2 min'],
      [135, '2 min 15 s'],
      [3600, '1 h 0 min'],
      [3725, '1 h 2 min'],
      [null, ''],
      [-5, ''],
      [Number.NaN, ''],
    ];
    for (const [sec, text] of cases) assert.equal(formatDuration(sec), text, String(sec));
    assert.equal(renderText('{{duration}} | {{durationText}}', crm()), '2 min 15 s | 2 min 15 s');
    assert.equal(renderText('{{duration}} | {{durationText}}', notify()), '2 min 15 s | 2 min 15 s');
  });
});

describe('README', () => {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const section = /### Template variables\n([\s\S]*?)\n#{2,3} /.exec(readme)?.[1] ?? '';

  test('one table documents exactly the variables, and the old names with what they stand for', () => {
    assert.ok(section, 'README has a "### Template variables" section');
    const rows = section.split('\n').filter((l) => l.startsWith('| `'));
    const documented = rows.flatMap((r) => [...(r.split(' | ')[0] ?? '').matchAll(/`([A-Za-z]+)`/g)].map((m) => m[1]));
    assert.deepEqual(documented, [...TEMPLATE_VARS]);
    for (const [old, name] of Object.entries(TEMPLATE_ALIASES))
      assert.match(section, new RegExp(`\`${old}\` → \`${name}\``), old);
    assert.match(section, /2 min 15 s/);
  });

  test('the CRM and notification docs link to it instead of keeping lists of their own', () => {
    for (const file of ['docs/crm.md', 'docs/notifications.md']) {
      const doc = readFileSync(new URL(`../${file}`, import.meta.url), 'utf8');
      assert.match(doc, /README\.md#template-variables/, file);
      assert.doesNotMatch(doc, /`durationText`|`counterpart`|\{\{remote\}\}/, `${file} keeps its own list`);
    }
    for (const heading of ['## CRM sync', '## Notifications']) {
      const at = readme.indexOf(heading);
      const next = readme.indexOf('\n## ', at + 1);
      assert.match(readme.slice(at, next), /\(#template-variables\)/, heading);
    }
  });
});

describe('hostile text', () => {
  /** A lone surrogate (half of a character outside the BMP): invalid UTF-16, U+FFFD or a refusal downstream. */
  const loneSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

  test('a long CRM title is cut between characters, never inside one', () => {
    for (const tail of ['😀😀', '👨‍👩‍👧 x', 'é'.normalize('NFD').repeat(3)]) {
      const title = renderTitle('{{title}}', { title: 'a'.repeat(248) + tail });
      assert.ok(title.length <= 250, `${title.length} units`);
      assert.ok(title.endsWith('…'));
      assert.doesNotMatch(title, loneSurrogate);
      const kept = title.slice(248, -1);
      assert.ok(tail.startsWith(kept), JSON.stringify(kept));
      // Whatever is kept of the tail is whole characters: the first grapheme or none of it.
      const first = [...new Intl.Segmenter(undefined, { granularity: 'grapheme' }).segment(tail)][0]!.segment;
      assert.ok(kept === '' || kept.startsWith(first), JSON.stringify(kept));
    }
  });

  test('a bidi override in a value does not reverse the rest of a title (the numbers after it)', () => {
    const title = renderTitle('{{title}} {{caller}}', { title: 'Anna \u202egnudnuK\u2067x', caller: '+4930123' });
    assert.equal(title, 'Anna gnudnuKx +4930123');
  });

  test('a CRM title is one line: control characters (NUL, ESC, NEL) fold like whitespace', () => {
    assert.equal(
      renderTitle('{{title}} ({{outcome}})', { title: 'a\u0000b\u001b[1m\u0085c\u2028d', outcome: 'x' }),
      'a b [1m c d (x)',
    );
  });
});

describe('the parts of a call a template reads (what a notification job keeps)', () => {
  const call = sampleCall('tv-parts', {
    patch: (p) => {
      p.assist.callHeadline = 'Moving the appointment';
      p.call.channel = { id: 'ch-1', name: 'Front desk' };
    },
  });
  test('every variable and alias renders the same from the call cut to the parts it reads', () => {
    for (const name of [...TEMPLATE_VARS, ...Object.keys(TEMPLATE_ALIASES)]) {
      const template = `{{${name}}}`;
      const cut = withParts(call, partsReadBy([template]));
      assert.equal(renderText(template, notify(cut)), renderText(template, notify(call)), name);
    }
    assert.equal(
      renderText('{{answers.0.answer}}', notify(withParts(call, partsReadBy(['{{answers.0.answer}}'])))),
      'Friday',
    );
  });
  test('a template without names, answers or headline reads none of them', () => {
    const parts = partsReadBy(['Thanks: {{summary}} ({{caller}}, {{date}})', undefined]);
    assert.deepEqual([...parts], ['summary']);
    const cut = withParts(call, parts);
    assert.deepEqual(
      [cut.users, cut.scenarios, cut.title, cut.channel, cut.forwarding],
      [[], [], undefined, null, null],
    );
    assert.equal(cut.summary, call.summary);
  });
});
