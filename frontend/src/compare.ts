// The Compare page's shapes (GET /sweeps, GET /sweeps/{id}, GET /evaluations/compare) and its pure helpers: the
// selection in the URL, the flattened config diff, confidence-interval half widths.
import type { MetricValue } from './types'

export const MIN_COMPARE = 2
export const MAX_COMPARE = 6
/** A sweep can hold up to 64 jobs: charts, config diff and evaluations show its first ones. */
export const MAX_SWEEP_JOBS = 24

export interface SweepSummary {
  id: number
  name: string
  owner: string
  grid: Record<string, unknown[]>
  seeds: number[]
  created_at: string
  jobs_total: number
  status_counts: Record<string, number>
}

export interface SweepJob {
  id: number
  name: string
  status: string
  point: Record<string, unknown>
  seed: number | null
  current_step: number
  max_steps: number | null
  error: string | null
  metrics: Record<string, number | null>
}

export interface MetricStats {
  mean: number | null
  std: number | null
  n: number
}

export interface SweepPoint {
  point: Record<string, unknown>
  label: string
  job_ids: number[]
  succeeded: number
  metrics: Record<string, MetricStats>
}

export interface SweepDetail extends SweepSummary {
  config: Record<string, unknown>
  jobs: SweepJob[]
  points: SweepPoint[]
  warning?: string | null
}

export interface PairedStats {
  n: number
  accuracy_a: number
  accuracy_b: number
  delta: number
  delta_stderr: number | null
  mcnemar_p: number
}

export interface BenchmarkComparison {
  metrics: Record<string, { a: number; b: number; delta: number }>
  paired: PairedStats
  counts: { both_correct: number; both_wrong: number; fixed: number; broken: number; only_in_a: number; only_in_b: number }
  same_data: boolean
}

export interface EvaluationComparison {
  a: { dir: string; model: string | null; evaluation_id: number }
  b: { dir: string; model: string | null; evaluation_id: number }
  benchmarks: Record<string, BenchmarkComparison>
  only_in_a: string[]
  only_in_b: string[]
}

/** `?jobs=3,5,9`: distinct positive ids in order, at most `max`. */
export function parseJobIds(raw: unknown, max = MAX_COMPARE): number[] {
  const text = Array.isArray(raw) ? raw.join(',') : typeof raw === 'string' ? raw : ''
  const ids: number[] = []
  for (const part of text.split(',')) {
    const n = Number(part.trim().replace(/^#/, ''))
    if (Number.isInteger(n) && n > 0 && !ids.includes(n)) ids.push(n)
  }
  return ids.slice(0, max)
}

export function parseId(raw: unknown): number | null {
  const n = Number(typeof raw === 'string' ? raw.trim() : NaN)
  return Number.isInteger(n) && n > 0 ? n : null
}

/** `{training: {learning_rate: 0.002}, rewards: [{weight: 1}]}` -> `{"training.learning_rate": 0.002,
 * "rewards.0.weight": 1}`. Empty objects and lists are leaves. */
export function flattenConfig(value: unknown, prefix = '', out: Record<string, unknown> = {}): Record<string, unknown> {
  if (Array.isArray(value) && value.length) {
    value.forEach((v, i) => flattenConfig(v, prefix ? `${prefix}.${i}` : String(i), out))
  } else if (value && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length) {
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) flattenConfig(v, prefix ? `${prefix}.${k}` : k, out)
  } else if (prefix) {
    out[prefix] = value
  }
  return out
}

export const MISSING = Symbol('missing')

export interface ConfigDiff {
  /** keys whose values differ across the configs, sorted */
  keys: string[]
  /** per config, key -> value (MISSING when a config lacks the key) */
  values: Record<string, unknown>[]
  identical: number
}

function canon(v: unknown): string {
  return v === MISSING ? '\u0000missing' : JSON.stringify(v ?? null)
}

export function configDiff(configs: Record<string, unknown>[]): ConfigDiff {
  const flat = configs.map((c) => flattenConfig(c))
  const all = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort()
  const keys: string[] = []
  let identical = 0
  for (const key of all) {
    const seen = new Set(flat.map((f) => canon(key in f ? f[key] : MISSING)))
    if (seen.size > 1) keys.push(key)
    else identical++
  }
  const values = flat.map((f) => Object.fromEntries(all.map((k) => [k, k in f ? f[k] : MISSING])))
  return { keys, values, identical }
}

export function fmtConfigValue(v: unknown): string {
  if (v === MISSING) return '—'
  if (typeof v === 'string') return v
  return JSON.stringify(v)
}

/** The 95% CI half width: from `ci95` when both ends are numbers, else 1.96 × stderr; null when neither. */
export function ciHalfWidth(m: MetricValue): number | null {
  const [lo, hi] = m.ci95 ?? []
  if (typeof lo === 'number' && typeof hi === 'number' && Number.isFinite(lo) && Number.isFinite(hi)) return (hi - lo) / 2
  if (typeof m.stderr === 'number' && Number.isFinite(m.stderr)) return m.stderr * 1.96
  return null
}

export function fmtP(p: number | null | undefined): string {
  if (p == null || !Number.isFinite(p)) return '—'
  if (p === 0) return '0'
  if (p < 0.001) return p.toExponential(1)
  return p >= 0.1 ? p.toFixed(2) : p.toPrecision(2)
}
