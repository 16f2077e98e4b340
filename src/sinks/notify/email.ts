// The `email` notification sink: one rule = one sink. Sends one mail per call (plain text + HTML,
// from operator templates) to fixed addresses through SMTP, honouring quiet hours and the
// "never twice" ledger.
import { z } from 'zod';
import { callHash, type CanonicalCall } from '../../model/call.js';
import { RetryLaterError } from '../../errors.js';
import type { Sink, SinkContext, SinkDeps, SinkResult, SinkSettings, SinkType } from '../types.js';
import { envList, envString, type EnvShape } from '../../env-values.js';
import { oneLine, renderTemplate } from '../template.js';
import { partsReadBy, templateVars } from '../template-vars.js';
import { NotificationLedger, privacyEnv, privacyKeyOf, sendOnce } from './ledger.js';
import { smtpOutcomeUnknown, type Mailer } from './mailer.js';
import { renderHtml, renderText } from './message.js';
import { commonOptions, templateSchema, timeZoneSchema } from './options.js';
import { quietHoursEnd } from './time.js';

/** `someone@example.com` or `Some One <someone@example.com>`. */
const addressSchema = z
  .string()
  .regex(/^(?:[^<>@]*<[^<>@\s]+@[^<>@\s]+>|[^<>@\s]+@[^<>@\s]+)$/, 'expected an e-mail address');

const DEFAULT_SUBJECT = 'Call {{caller}} → {{callee}} ({{outcome}}, {{date}} {{time}})';
/** The default subject of a call with a headline (`assist.callHeadline`): the headline first. */
const DEFAULT_SUBJECT_WITH_TITLE = '{{title}} — {{caller}} → {{callee}} ({{outcome}}, {{date}} {{time}})';
/** Longest subject in UTF-16 units (the CRM titles' length); a longer one is cut with an ellipsis. */
const SUBJECT_MAX = 250;
const DEFAULT_TEXT = `{{direction}} call from {{caller}} to {{callee}}
When: {{dateTime}} ({{timeZone}}), duration {{duration}}
Outcome: {{outcome}}
{{agentLine}}

{{summarySection}}

{{keyPointsSection}}

{{topicsLine}}`;

const emailOptionsSchema = z.strictObject({
  /** Sender. Default: SMTP_FROM. */
  from: addressSchema.optional(),
  /** Recipients (one address or a list). */
  to: z.union([addressSchema, z.array(addressSchema).min(1)]).transform((v) => (Array.isArray(v) ? v : [v])),
  /** `{{field}}` template of the subject. */
  subject: templateSchema.default(DEFAULT_SUBJECT),
  /** `{{field}}` template of the plain-text part. */
  text: templateSchema.default(DEFAULT_TEXT),
  /** `{{field}}` template of the HTML part (values are HTML-escaped). Default: the text part, escaped. */
  html: templateSchema.optional(),
  ...commonOptions,
});

export type EmailOptions = z.infer<typeof emailOptionsSchema>;

/** The environment variables the e-mail sink type reads. */
const emailEnv = {
  /** `smtp://user:pass@host:587` (STARTTLS when offered) or `smtps://…:465`: every e-mail sink's server. */
  SMTP_URL: envString.refine((v) => v === undefined || (URL.canParse(v) && /^smtps?:$/.test(new URL(v).protocol)), {
    message: 'expected smtp://user:pass@host:587 or smtps://user:pass@host:465',
  }),
  /** The sinks' `from` default. */
  SMTP_FROM: envString.refine((v) => v === undefined || addressSchema.safeParse(v).success, {
    message: 'expected an e-mail address',
  }),
  /** Shortcut: with SMTP_URL, the sink `email` mails every call with a summary to these addresses (comma-separated). */
  NOTIFY_EMAIL_TO: envList.refine((to) => to.every((a) => addressSchema.safeParse(a).success), {
    message: 'expected e-mail addresses separated by commas',
  }),
  /** Time zone of the NOTIFY_EMAIL_TO sink. Default UTC. */
  NOTIFY_TIME_ZONE: envString.refine((v) => v === undefined || timeZoneSchema.safeParse(v).success, {
    message: 'expected an IANA time zone such as Europe/Berlin',
  }),
  PRIVACY_HMAC_SECRET: privacyEnv.PRIVACY_HMAC_SECRET,
} satisfies EnvShape;

/** The email type's section of the configuration: its variables, parsed. */
type EmailSettings = SinkSettings<typeof emailEnv>;

const NO_SMTP = 'needs an SMTP server: set SMTP_URL (e.g. smtp://user:pass@mail.example.com:587)';
const NO_FROM = "needs a sender: set SMTP_FROM or the sink's from";

function domainOf(address: string): string {
  return /@([^<>@\s]+?)>?$/.exec(address.trim())?.[1] ?? 'callsync.invalid';
}

class EmailSink implements Sink {
  readonly type = 'email';
  private readonly ledger: NotificationLedger;

  constructor(
    readonly name: string,
    private readonly o: EmailOptions,
    private readonly from: string,
    private readonly mailer: Mailer,
    private readonly deps: SinkDeps<EmailSettings>,
  ) {
    this.ledger = new NotificationLedger(deps.state, undefined, privacyKeyOf(deps));
  }

  async deliver(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    const now = this.deps.now();
    if (this.o.maxAge !== undefined && now.getTime() - Date.parse(call.startedAt) > this.o.maxAge) {
      return { status: 'skipped', reason: 'call older than maxAge' };
    }
    const earlier = await this.ledger.read(call.key, 'mail');
    if (earlier?.state === 'sent') return { status: 'skipped', reason: 'already sent' };
    if (earlier?.state === 'unknown')
      return { status: 'skipped', reason: "an earlier attempt's outcome is unknown; not resent" };

    const q = this.o.quietHours;
    const quietEnd = q
      ? quietHoursEnd(now, { start: q.start, end: q.end, timeZone: q.timeZone ?? this.o.timeZone })
      : null;
    if (quietEnd) {
      throw new RetryLaterError(`quiet hours until ${quietEnd.toISOString()}`, quietEnd.getTime() - now.getTime(), {
        scope: 'job',
      });
    }

    const fields = templateVars(call, { timeZone: this.o.timeZone });
    const text = renderText(this.o.text, fields);
    const message = {
      from: this.from,
      to: this.o.to,
      // A subject is one line, of a length a mail client shows.
      subject: oneLine(
        renderTemplate(
          this.o.subject === DEFAULT_SUBJECT && call.title ? DEFAULT_SUBJECT_WITH_TITLE : this.o.subject,
          fields,
        ),
        SUBJECT_MAX,
      ),
      text,
      html: renderHtml(this.o.html, text, fields),
      messageId: `<${callHash(call.key)}.${this.name.replace(/[^A-Za-z0-9._-]/g, '-')}@${domainOf(this.from)}>`,
    };
    let refused: string[] = [];
    const result = await sendOnce({
      ledger: this.ledger,
      callKey: call.key,
      recipient: 'mail',
      what: `e-mail to ${this.o.to.length} recipient(s)`,
      now: this.deps.now,
      outcomeUnknown: smtpOutcomeUnknown,
      jobId: ctx.jobId,
      send: async () => {
        refused = (await this.mailer.send(message)).refused ?? [];
        return message.messageId;
      },
      // The `sent` marker goes with the attempt's timeline entries, once the result is made.
      deferSentMarker: true,
    });
    if (!result.sent) return { status: 'skipped', reason: result.reason };
    ctx.log.info({ sink: this.name, recipients: this.o.to.length, messageId: message.messageId }, 'e-mail sent');
    const done: SinkResult = { status: 'done', refs: { messageId: message.messageId } };
    if (refused.length > 0) {
      // The mail went to the others; resending it would send it to them twice. Said in the result (the call's timeline).
      done.reason = `sent to ${this.o.to.length - refused.length} of ${this.o.to.length} recipients; refused: ${refused.join('; ')}`;
      ctx.log.warn({ sink: this.name, refused }, 'e-mail: the server refused some recipients');
    }
    if (result.marker) await this.ledger.writeSent(result.marker, done, ctx.outcome);
    return done;
  }

  async close(): Promise<void> {
    await this.mailer.close();
  }
}

/** The e-mail sink type; `createMailer` is the door tests and other transports come through. */
function createEmailSinkType(
  // nodemailer is imported when the first e-mail sink is built, not when the config is read.
  createMailer: (url: string) => Mailer | Promise<Mailer> = async (url) =>
    (await import('./smtp.js')).createSmtpMailer(url),
): SinkType<EmailOptions, EmailSettings> {
  return {
    type: 'email',
    options: emailOptionsSchema as z.ZodType<EmailOptions>,
    needsRaw: () => false,
    needsTranscript: () => false,
    // The default subject has the call's headline first when there is one.
    needsParts: (o) =>
      partsReadBy([o.subject, o.subject === DEFAULT_SUBJECT ? DEFAULT_SUBJECT_WITH_TITLE : undefined, o.text, o.html]),
    env: emailEnv,
    check(options, env) {
      return [...(env.SMTP_URL ? [] : [NO_SMTP]), ...((options.from ?? env.SMTP_FROM) ? [] : [NO_FROM])];
    },
    async create(name, options, deps) {
      const env = deps.settings;
      const url = env.SMTP_URL;
      if (!url) throw new Error(`sink "${name}" (email) ${NO_SMTP}`);
      const from = options.from ?? env.SMTP_FROM;
      if (!from) throw new Error(`sink "${name}" (email) ${NO_FROM}`);
      return new EmailSink(name, options, from, await createMailer(url), deps);
    },
    fromEnv(env) {
      // NOTIFY_EMAIL_TO alone (with SMTP_URL) gives the team a summary mail of every call that has one.
      const to = env.NOTIFY_EMAIL_TO ?? [];
      if (to.length === 0 || !env.SMTP_URL) return null;
      return {
        sinks: { email: { type: 'email', to, ...(env.NOTIFY_TIME_ZONE ? { timeZone: env.NOTIFY_TIME_ZONE } : {}) } },
        routes: [{ name: 'summary e-mail', when: { hasSummary: true }, to: 'email' }],
      };
    },
  };
}

export const emailSinkType = createEmailSinkType();
