// A data job's executor and Ray progress, read from its config (services/dataset_operations.py stores
// `executor`; the data worker adds `ray_progress` while the operation runs on Ray).

import type { DataExecutor, RayProgress } from './types'

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

function num(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : 0
}

/** `config.ray_progress`, or null when absent or not that shape. */
export function rayProgress(config: Record<string, unknown> | null | undefined): RayProgress | null {
  const p = config?.ray_progress
  if (!isRecord(p)) return null
  const workers: Record<string, number> = {}
  if (isRecord(p.workers)) for (const [name, blocks] of Object.entries(p.workers)) workers[name] = num(blocks)
  return { stage: typeof p.stage === 'string' ? p.stage : '', done: num(p.done), total: num(p.total), workers }
}

/** The executor of a data job: null when its config names none (ingest, audit, ... jobs). `executor` is a name
 * ("local" | "ray"), or an object with `name` and `reason` (as an evaluation's). */
export function dataExecutor(config: Record<string, unknown> | null | undefined): DataExecutor | null {
  if (!config) return null
  const raw = config.executor
  const progress = rayProgress(config)
  let name: string | null = null
  let reason: string | null = typeof config.executor_reason === 'string' ? config.executor_reason : null
  if (typeof raw === 'string') name = raw
  else if (isRecord(raw) && typeof raw.name === 'string') {
    name = raw.name
    if (typeof raw.reason === 'string') reason = raw.reason
  }
  if (name === null && progress) name = 'ray'
  if (name === null) return null
  const workers = progress ? Object.keys(progress.workers).length || null : name === 'local' ? 1 : null
  return { name, reason, workers, progress }
}

/** The per-worker rows of a Ray progress, by name: blocks done and their share of all blocks (0-100). */
export function rayWorkerRows(p: RayProgress): { name: string; blocks: number; share: number }[] {
  return Object.entries(p.workers)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, blocks]) => ({ name, blocks, share: p.total ? Math.min(100, (blocks / p.total) * 100) : 0 }))
}
