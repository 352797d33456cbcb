// Metric names -> chart panels: one panel per family (its own y axis), in the order a user reads a run. Names no
// family claims go to "other". EMA smoothing and the ETA are computed here (pure functions, unit-sized).

export interface Family {
  key: string
  title: string
  match: (name: string) => boolean
}

export const FAMILIES: Family[] = [
  { key: 'loss', title: 'Loss', match: (n) => /(^|[/_])loss$/.test(n) || n === 'loss' },
  { key: 'reward', title: 'Rewards', match: (n) => /reward|score/.test(n) },
  { key: 'kl', title: 'KL', match: (n) => /(^|[/_])kl($|[/_])/.test(n) },
  { key: 'entropy', title: 'Entropy', match: (n) => /entropy/.test(n) },
  { key: 'lr', title: 'Learning rate', match: (n) => n === 'lr' || /learning_rate/.test(n) },
  { key: 'grad_norm', title: 'Grad norm', match: (n) => /grad_norm/.test(n) },
  // Seconds and rates have different units: separate panels, so neither is flattened by the other's axis.
  { key: 'step_time', title: 'Seconds per step', match: (n) => /sec_per_step|_runtime$|(^|[/_])time(_s)?$/.test(n) },
  { key: 'throughput', title: 'Throughput', match: (n) => /per_sec|per_second|throughput|samples_per|tokens_per/.test(n) },
  { key: 'memory', title: 'Memory', match: (n) => /mem|memory/.test(n) },
  { key: 'length', title: 'Completion length', match: (n) => /length|clipped_ratio/.test(n) },
  { key: 'accuracy', title: 'Accuracies and margins', match: (n) => /accurac|margin|chosen|rejected/.test(n) },
]

export function familyOf(name: string): string {
  return FAMILIES.find((f) => f.match(name))?.key ?? 'other'
}

export function groupByFamily(names: string[]): { key: string; title: string; names: string[] }[] {
  const groups = new Map<string, string[]>()
  for (const n of names) {
    const key = familyOf(n)
    groups.set(key, [...(groups.get(key) ?? []), n])
  }
  const ordered = [...FAMILIES, { key: 'other', title: 'Other', match: () => true }]
  return ordered.filter((f) => groups.has(f.key)).map((f) => ({ key: f.key, title: f.title, names: groups.get(f.key)! }))
}

/** Exponential moving average (debiased, as TensorBoard's smoothing): weight 0 = raw. Nulls pass through. */
export function ema(values: (number | null)[], weight: number): (number | null)[] {
  if (weight <= 0) return values
  let last = 0
  let n = 0
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return v
    last = last * weight + (1 - weight) * v
    n++
    return last / (1 - weight ** n)
  })
}

/** Seconds left at the recent rate: steps per second over the last `window` logged points. */
export function eta(steps: number[], times: (number | null)[], target: number | null, window = 10): {
  seconds: number
  stepsPerSec: number
} | null {
  const pts = steps.map((s, i) => [s, times[i]] as const).filter((p): p is readonly [number, number] => p[1] !== null)
  if (!target || pts.length < 2) return null
  const recent = pts.slice(-window)
  const [s0, t0] = recent[0]
  const [s1, t1] = recent[recent.length - 1]
  if (t1 <= t0 || s1 <= s0) return null
  const rate = (s1 - s0) / (t1 - t0)
  return { seconds: Math.max(0, (target - s1) / rate), stepsPerSec: rate }
}
