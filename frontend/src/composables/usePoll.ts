import { onBeforeUnmount, onMounted } from 'vue'

/**
 * Calls `fn` on mount and then every `ms` after the previous call settles (no overlapping requests).
 * `fn` may return false to stop polling until `poke()` is called. The timer is cleared on unmount.
 */
export function usePoll(fn: () => Promise<boolean | void>, ms: number) {
  let timer: ReturnType<typeof setTimeout> | null = null
  let stopped = false
  let running = false

  async function tick(): Promise<void> {
    if (stopped || running) return
    running = true
    if (timer) clearTimeout(timer)
    timer = null
    let again = true
    try {
      again = (await fn()) !== false
    } catch {
      // The caller shows its own errors; keep polling.
    } finally {
      running = false
    }
    if (!stopped && again) timer = setTimeout(tick, ms)
  }

  /** Run now (and resume polling if it had stopped). */
  function poke(): Promise<void> {
    return tick()
  }

  onMounted(() => {
    void tick()
  })
  onBeforeUnmount(() => {
    stopped = true
    if (timer) clearTimeout(timer)
    timer = null
  })
  return { poke }
}
