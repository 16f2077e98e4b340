// Slows password guessing at the login page and for Basic auth, per peer and per account, with a
// backoff that doubles with every failure beyond a few free ones — without a global lockout: a
// peer that never failed (or logged in lately) is never held back by others' failures.
//
//   per peer:    PEER_FREE_FAILURES failures in the window are free; each further one makes the
//                peer wait 1 s, 2 s, 4 s … up to MAX_WAIT_MS before its next try is even checked.
//   per account: beyond ACCOUNT_FREE_FAILURES failures in the window (from any peers) the account
//                is under attack; then a peer that has failed on it too waits the account's backoff,
//                while a peer with no failure, or one that logged in within KNOWN_GOOD_MS, still
//                gets its try. A spread attack gets one guess per address; the operator gets in.
// A success from a peer clears its failures. The state is in memory, per process, bounded.

/** Failures counted together: a peer or account quiet this long starts afresh. */
const THROTTLE_WINDOW_MS = 15 * 60_000;
const PEER_FREE_FAILURES = 5;
const ACCOUNT_FREE_FAILURES = 20;
const FIRST_WAIT_MS = 1000;
const MAX_WAIT_MS = 15 * 60_000;
/** A peer that logged in this recently is not held back by the account's backoff. */
const KNOWN_GOOD_MS = 30 * 24 * 3600_000;
/** At most this many peers (and accounts) are remembered; the oldest are forgotten first. */
const MAX_ENTRIES = 10_000;

interface Failures {
  count: number;
  last: number;
  /** No try is checked before this time. */
  until: number;
}

export interface ThrottleDecision {
  /** Milliseconds to wait before trying again; 0: go ahead. */
  waitMs: number;
  /** What holds the try back. */
  by?: 'peer' | 'account';
}

function backoff(excess: number): number {
  return Math.min(MAX_WAIT_MS, FIRST_WAIT_MS * 2 ** Math.min(Math.max(0, excess - 1), 20));
}

/** Insertion order is age order: re-inserting moves a key to the end, the first key is the oldest. */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > MAX_ENTRIES) map.delete(map.keys().next().value!);
}

export class LoginThrottle {
  private readonly peers = new Map<string, Failures>();
  private readonly accounts = new Map<string, Failures>();
  /** `account peer` pairs that failed within the window. */
  private readonly pairs = new Map<string, number>();
  private readonly good = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  private fresh(map: Map<string, Failures>, key: string): Failures | undefined {
    const f = map.get(key);
    if (f && this.now() - f.last > THROTTLE_WINDOW_MS && this.now() >= f.until) {
      map.delete(key);
      return undefined;
    }
    return f;
  }

  /** Whether a try from `peer` for `account` may be checked now. */
  check(peer: string, account: string): ThrottleDecision {
    const now = this.now();
    const p = this.fresh(this.peers, peer);
    if (p && p.until > now) return { waitMs: p.until - now, by: 'peer' };
    const a = this.fresh(this.accounts, account);
    if (a && a.until > now && !this.knownGood(peer) && this.failedBefore(account, peer))
      return { waitMs: a.until - now, by: 'account' };
    return { waitMs: 0 };
  }

  /** Counts a wrong password; returns the failures of the peer and of the account in the window. */
  failed(peer: string, account: string): { peer: number; account: number } {
    const now = this.now();
    const bump = (map: Map<string, Failures>, key: string, free: number) => {
      const f = this.fresh(map, key) ?? { count: 0, last: now, until: 0 };
      f.count++;
      f.last = now;
      if (f.count > free) f.until = now + backoff(f.count - free);
      remember(map, key, f);
      return f.count;
    };
    remember(this.pairs, `${account} ${peer}`, now);
    return {
      peer: bump(this.peers, peer, PEER_FREE_FAILURES),
      account: bump(this.accounts, account, ACCOUNT_FREE_FAILURES),
    };
  }

  /** A successful login: the peer's failures are forgotten, and it is known good for a while. */
  succeeded(peer: string, account: string): void {
    this.peers.delete(peer);
    this.pairs.delete(`${account} ${peer}`);
    remember(this.good, peer, this.now());
  }

  private knownGood(peer: string): boolean {
    const at = this.good.get(peer);
    return at !== undefined && this.now() - at <= KNOWN_GOOD_MS;
  }

  private failedBefore(account: string, peer: string): boolean {
    const at = this.pairs.get(`${account} ${peer}`);
    return at !== undefined && this.now() - at <= THROTTLE_WINDOW_MS;
  }
}

/** Retry-After in whole seconds (at least 1). */
export function retryAfterSeconds(waitMs: number): string {
  return String(Math.max(1, Math.ceil(waitMs / 1000)));
}
