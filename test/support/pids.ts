// Processes by pid, for tests that start callsync or redis-server as processes of their own.

/** True while a process with this pid exists (signal 0 checks without signalling). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
