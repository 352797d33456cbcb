// Helpers for the dataset pages: the audit report's distributions and scalars, lineage parameter summaries.
import type { Bar } from './components/BarChart.vue'
import { fmtAxis, fmtCount, fmtMetric } from './format'
import type { DatasetStats, Distribution } from './types'

export interface NamedDistribution {
  name: string
  dist: Distribution
}

export interface StatItem {
  key: string
  value: string
  title?: string
}

function isObject(v: unknown): v is Record<string, unknown> {
  return !!v && typeof v === 'object' && !Array.isArray(v)
}

function isDistribution(v: unknown): v is Distribution {
  if (!isObject(v) || typeof v.count !== 'number') return false
  const h = v.histogram
  return (isObject(h) && Array.isArray(h.edges) && Array.isArray(h.counts)) || typeof v.mean === 'number'
}

/** Integers with separators, other numbers with 4 decimals (or exponent). */
export function fmtNum(v: unknown): string {
  if (typeof v === 'number') return Number.isInteger(v) ? fmtCount(v) : fmtMetric(v)
  if (v === null || v === undefined) return '—'
  if (typeof v === 'boolean') return v ? 'yes' : 'no'
  return String(v)
}

// Parts of the report that are not statistics of the rows, are shown elsewhere, or repeat another key.
const SKIP = new Set([
  'definitions', 'input', 'version_id', 'sha256', 'cached', 'seconds', 'stats.rows', 'difficulty.buckets',
  'duplicates.duplicate_rate',
])

/**
 * Splits the audit report into its distributions (objects with count + histogram/mean, anywhere in the tree) and
 * the remaining scalars, flattened to dotted keys. `difficulty.features.words` becomes "difficulty features: words".
 */
export function splitStats(stats: DatasetStats | Record<string, unknown>): { dists: NamedDistribution[]; scalars: StatItem[] } {
  const dists: NamedDistribution[] = []
  const scalars: StatItem[] = []
  const definitions = isObject(stats.definitions) ? (stats.definitions as Record<string, string>) : {}

  const label = (path: string[]): string => {
    const p = path[0] === 'stats' ? path.slice(1) : path
    return p.length > 1 && p[p.length - 2] === 'features' ? `${p.slice(0, -2).join('.')} ${p[p.length - 2]}: ${p[p.length - 1]}` : p.join('.')
  }

  // The report's definitions as tooltips: "distinct_n" explains distinct_1 and distinct_2, "difficulty" its keys.
  const titleFor = (key: string): string | undefined => {
    const d = Object.keys(definitions).find(
      (k) => key === k || key.startsWith(k.replace(/_n$/, '_')) || key.startsWith(`${k}.`) || key.startsWith(`${k}_`),
    )
    return d ? definitions[d] : undefined
  }

  const walk = (value: unknown, path: string[]) => {
    const full = path.join('.')
    if (SKIP.has(full) || value === null || value === undefined) return
    const key = label(path)
    if (isDistribution(value)) {
      dists.push({ name: key, dist: value })
      return
    }
    if (isObject(value)) {
      const entries = Object.entries(value)
      // A small map of numbers (n-gram entropy, difficulty buckets): one line.
      if (entries.length && entries.length <= 6 && entries.every(([, v]) => typeof v === 'number' || v === null)) {
        scalars.push({ key, value: entries.map(([k, v]) => `${k}: ${fmtNum(v)}`).join(' · '), title: titleFor(key) })
        return
      }
      for (const [k, v] of entries) walk(v, [...path, k])
      return
    }
    if (Array.isArray(value)) {
      if (value.every((v) => typeof v !== 'object' || v === null)) {
        scalars.push({ key, value: value.length ? value.map(fmtNum).join(', ') : '—' })
      } else {
        scalars.push({ key, value: `${value.length} item${value.length === 1 ? '' : 's'}` })
      }
      return
    }
    scalars.push({ key, value: fmtNum(value), title: titleFor(key) })
  }

  for (const [k, v] of Object.entries(stats)) walk(v, [k])
  return { dists, scalars }
}

/**
 * A histogram as bars, empty bins at both ends trimmed. Bins of width 1 on integer edges are labelled by their value
 * ("2"), others by their range ("[0.5, 0.55)").
 */
export function histogramBars(d: Distribution): Bar[] {
  const h = d.histogram
  if (h && h.counts.length && h.edges.length === h.counts.length + 1) {
    let first = 0
    let last = h.counts.length - 1
    while (first < last && h.counts[first] === 0) first++
    while (last > first && h.counts[last] === 0) last--
    const bars: Bar[] = []
    for (let i = first; i <= last; i++) {
      const a = h.edges[i]
      const b = h.edges[i + 1]
      const unit = Number.isInteger(a) && Number.isInteger(b) && b - a === 1
      const closing = i === h.counts.length - 1 ? ']' : ')'
      bars.push({
        label: unit ? String(a) : `[${fmtAxis(a)}, ${fmtAxis(b)}${closing}`,
        value: h.counts[i],
        note: `${d.count ? ((100 * h.counts[i]) / d.count).toFixed(1) : 0}% of ${fmtCount(d.count)}`,
      })
    }
    return bars
  }
  if (d.counts && Object.keys(d.counts).length) {
    return Object.entries(d.counts).map(([k, v]) => ({ label: k, value: v }))
  }
  return []
}

function scalarText(v: unknown): string {
  if (typeof v === 'string') return v
  return JSON.stringify(v)
}

/**
 * A one-line summary of an operation's parameters (the version's `recipe`): non-null values as key=value, a clean
 * recipe as its chain of operators (with their parameters when `opArgs`; the server fills in every default, so the
 * short form names the operators only).
 */
export function paramsSummary(recipe: Record<string, unknown> | null, opArgs = true): string {
  if (!recipe) return ''
  const parts: string[] = []
  for (const [k, v] of Object.entries(recipe)) {
    if (v === null || v === undefined) continue
    if (k === 'recipe' && isObject(v) && Array.isArray(v.operators)) {
      const ops = v.operators.map((o) => {
        if (!isObject(o)) return scalarText(o)
        const { op, ...rest } = o
        const inner = isObject(rest.params) && Object.keys(rest).length === 1 ? rest.params : rest
        if (!opArgs) return String(op)
        const args = Object.entries(inner)
          .filter(([, x]) => x !== null && x !== undefined)
          .map(([a, x]) => `${a}=${scalarText(x)}`)
        return args.length ? `${String(op)}(${args.join(', ')})` : String(op)
      })
      const name = typeof v.name === 'string' && v.name ? `${v.name}: ` : ''
      parts.push(`recipe=${name}${ops.join(' → ')}`)
      continue
    }
    parts.push(`${k}=${scalarText(v)}`)
  }
  return parts.join(' · ')
}
