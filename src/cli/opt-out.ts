// `callsync opt-out add|remove|list`: numbers that never get an SMS (the notification sinks' list).
import type { RedisClient } from '../../queues/connection.js';
import { redisKeys } from '../../queues/keys.js';
import type { Config } from '../config/index.js';
import { maskPhone } from '../log.js';
import { OptOutList } from '../sinks/notify/opt-out.js';
import { UsageError, type CliIo } from './io.js';
import { numbersOfWords } from './number-words.js';

export async function optOut(
  config: Config,
  redis: RedisClient,
  action: string,
  numbers: string[],
  io: CliIo,
): Promise<number> {
  const list = new OptOutList(redis, redisKeys(config.redis).area('optout'));
  if (action === 'list') {
    const all = await list.list();
    if (all.length === 0) io.out('the opt-out list is empty');
    for (const n of all) io.out(n);
    return 0;
  }
  if (numbers.length === 0)
    throw new UsageError(`opt-out ${action} needs at least one NUMBER (E.164, e.g. +4915112345678)`);
  // National numbers (0151 …) are read in PHONE_DEFAULT_REGION (default DE), like the CRM sinks read them.
  const region = config.privacy.defaultRegion;
  const normalized = numbersOfWords(numbers, region);
  if (action === 'add') {
    const added = await list.add(...normalized);
    io.out(
      `added ${added} number(s)${added < normalized.length ? ` (${normalized.length - added} already on the list)` : ''}: ${normalized.map((n) => maskPhone(n)).join(', ')}`,
    );
    return 0;
  }
  const removed = await list.remove(...normalized);
  io.out(
    `removed ${removed} number(s)${removed < normalized.length ? ` (${normalized.length - removed} were not on the list)` : ''}`,
  );
  return 0;
}
