// A small typed client for /api/v1: bearer token from localStorage, JSON in and out, FastAPI errors parsed into
// a list of {loc, msg}. A 401 calls the handler set by the auth store (which shows the token prompt).
import type {
  BenchmarkInfo, Checkpoint, Dashboard, RayCluster, Dataset, IngestQueued, DatasetOperation, DatasetOperationInfo, DatasetStats, DatasetVersion,
  DatasetVersionDetail, Evaluation, EvaluationDetail, Job, JobEvent, Leaderboard, MetricsOut, Page, RowsPage, Sample,
  Quota, QuotaLimits, SavedView, Schedule, UsageGroupBy, UsageReport, User,
} from './types'
import type { EvaluationComparison, SweepDetail, SweepSummary } from './compare'
import { humanizeError } from './errorText'

export const API_BASE = '/api/v1'
export const TOKEN_KEY = 'tp_token'

export interface ErrorItem {
  loc: string
  msg: string
}

export class ApiError extends Error {
  readonly status: number
  readonly errors: ErrorItem[]
  /** The parsed error body: some endpoints add fields next to `detail` (a rejected upload: rows, bad_rows, stored). */
  readonly body: unknown

  constructor(status: number, errors: ErrorItem[], body: unknown = null) {
    super(errors.map((e) => (e.loc ? `${e.loc}: ${e.msg}` : e.msg)).join('; ') || `HTTP ${status}`)
    this.name = 'ApiError'
    this.status = status
    this.errors = errors
    this.body = body
  }
}

/** Anything thrown (ApiError, a network failure, a YAML syntax error) as a list for <ErrorList>. */
export function toErrorItems(err: unknown, loc = ''): ErrorItem[] {
  if (err instanceof ApiError) return err.errors
  if (err instanceof Error) return [{ loc, msg: err.message }]
  return [{ loc, msg: String(err) }]
}

export function getToken(): string | null {
  try {
    return localStorage.getItem(TOKEN_KEY)
  } catch {
    return null
  }
}

export function setToken(token: string | null): void {
  if (token) localStorage.setItem(TOKEN_KEY, token)
  else localStorage.removeItem(TOKEN_KEY)
}

let unauthorizedHandler: (() => void) | null = null
export function onUnauthorized(handler: () => void): void {
  unauthorizedHandler = handler
}

function locText(loc: unknown): string {
  if (Array.isArray(loc)) {
    // FastAPI's default shape: ["body", "config", "model"]; drop the "body"/"query" prefix.
    const parts = loc.map(String)
    if (parts.length > 1 && ['body', 'query', 'path', 'header'].includes(parts[0])) parts.shift()
    return parts.join('.')
  }
  return loc == null ? '' : String(loc)
}

export function parseErrorBody(status: number, statusText: string, body: unknown): ErrorItem[] {
  if (body && typeof body === 'object' && 'detail' in body) {
    const detail = (body as { detail: unknown }).detail
    if (typeof detail === 'string') return [{ loc: '', msg: detail }]
    if (Array.isArray(detail)) {
      // Each message as a sentence a person understands (errorText.ts), whatever page shows it.
      return detail.map((d) => {
        if (!d || typeof d !== 'object') return { loc: '', msg: String(d) }
        const loc = locText((d as { loc?: unknown }).loc)
        return { loc, msg: humanizeError(loc, String((d as { msg?: unknown }).msg ?? JSON.stringify(d))) }
      })
    }
    if (detail != null) return [{ loc: '', msg: JSON.stringify(detail) }]
  }
  if (typeof body === 'string' && body.trim()) return [{ loc: '', msg: `HTTP ${status}: ${body.trim().slice(0, 300)}` }]
  return [{ loc: '', msg: `HTTP ${status} ${statusText}`.trim() }]
}

type QueryValue = string | number | boolean | null | undefined | (string | number)[]

export function buildQuery(query?: Record<string, QueryValue>): string {
  if (!query) return ''
  const params = new URLSearchParams()
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === null || value === '') continue
    if (Array.isArray(value)) value.forEach((v) => params.append(key, String(v)))
    else params.append(key, String(value))
  }
  const s = params.toString()
  return s ? `?${s}` : ''
}

export async function request<T>(
  method: string,
  path: string,
  options: { query?: Record<string, QueryValue>; body?: unknown; form?: FormData; signal?: AbortSignal } = {},
): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json' }
  const token = getToken()
  if (token) headers.Authorization = `Bearer ${token}`
  let body: string | FormData | undefined
  if (options.form !== undefined) {
    // multipart/form-data: no Content-Type here, the browser sets it with the boundary.
    body = options.form
  } else if (options.body !== undefined) {
    headers['Content-Type'] = 'application/json'
    body = JSON.stringify(options.body)
  }
  let res: Response
  try {
    res = await fetch(API_BASE + path + buildQuery(options.query), { method, headers, body, signal: options.signal })
  } catch (err) {
    if (err instanceof DOMException && err.name === 'AbortError') throw err
    throw new ApiError(0, [{ loc: '', msg: `cannot reach the server (${err instanceof Error ? err.message : err})` }])
  }
  const text = await res.text()
  let data: unknown = text
  if (text && (res.headers.get('content-type') ?? '').includes('json')) {
    try {
      data = JSON.parse(text)
    } catch {
      data = text
    }
  }
  if (!res.ok) {
    // A 401 for a request sent with a token that has since been replaced (the user just saved a new one while
    // it was in flight) says nothing about the new token: only the current token's 401 shows the prompt.
    if (res.status === 401 && unauthorizedHandler && getToken() === token) unauthorizedHandler()
    throw new ApiError(res.status, parseErrorBody(res.status, res.statusText, data), data)
  }
  return (text ? data : null) as T
}

/** POST a multipart/form-data body (file uploads). Empty string values are left out. */
export function postForm<T>(path: string, fields: Record<string, string | Blob | null | undefined>): Promise<T> {
  const form = new FormData()
  for (const [key, value] of Object.entries(fields)) {
    if (value === undefined || value === null || value === '') continue
    form.append(key, value)
  }
  return request<T>('POST', path, { form })
}

// ---- endpoints ----

export interface JobListQuery {
  status?: string
  limit?: number
  offset?: number
  sort?: string
  q?: string
  algorithm?: string
  engine?: string
  kind?: string
  owner?: string
  tag?: string
}

export interface ConfigProblem {
  loc: (string | number)[]
  msg: string
}

export interface JobValidation {
  valid: boolean
  effective_config: Record<string, unknown> | null
  errors: ConfigProblem[]
  warnings: string[]
  /** peak memory per device, estimated from the model's config.json (the worker's preflight judges it) */
  memory?: { device: string; total_gib: number; parts_gib: Record<string, number>; summary: string } | null
}

export interface ExampleConfig {
  name: string
  algorithm: string
  description: string
  config: Record<string, unknown>
}

export interface RegisteredModel {
  id: number
  name: string
  path: string
  owner: string | null
  shared: boolean
}

export interface JobTemplate {
  id: number
  name: string
  description: string | null
  config: Record<string, unknown>
  shared: boolean
  owner?: string
}

export interface Rollout {
  step: number
  prompt: string
  completion: string
  rewards: Record<string, number | null>
  reward: number | null
  advantage: number | null
  /** An agent episode's turns after the prompt (null for a plain completion). */
  turns?: RolloutTurn[] | null
  tool_calls?: number | null
  tool_errors?: number | null
}

/** One turn of an agent episode: the model's message (with the calls it made) or a tool's result. */
export interface RolloutTurn {
  role: string
  content: string
  tool_calls?: { name: string; arguments: unknown }[] | null
  name?: string | null
  arguments?: unknown
  ok?: boolean | null
  latency_s?: number | null
  reward?: number | null
}

/** A registered tool an RL job's `agent.tools` may name (GET /config/tools). */
export interface ToolInfo {
  name: string
  description: string
  /** The OpenAI function schema the model sees. */
  schema: Record<string, unknown>
  /** JSON Schema of the tool's settings (`agent.tools[i].params`). */
  params_schema: Record<string, unknown>
}

export interface RolloutPage extends Page<Rollout> {
  steps: number[]
}

export interface ServedModel {
  id: string
  owned_by: string
}

export const api = {
  servedModels: () => request<{ data: ServedModel[] }>('GET', '/openai/v1/models'),
  jobRollouts: (
    id: number,
    q: { step?: number; min_reward?: number; max_reward?: number; tool_errors?: boolean; limit?: number; offset?: number } = {},
  ) =>
    request<RolloutPage>('GET', `/jobs/${id}/rollouts`, { query: q }),
  me: () => request<User>('GET', '/users/me'),
  /** Admins only. */
  listUsers: (q: { limit?: number; offset?: number } = {}) => request<Page<User>>('GET', '/users', { query: q }),
  /** Device-hours, CPU time, peak memory and cost in [since, until) (ISO times), per user, job or device type. */
  usage: (q: { since?: string; until?: string; group_by?: UsageGroupBy } = {}) =>
    request<UsageReport>('GET', '/usage', { query: q }),
  /** The user themself or an admin. */
  getQuota: (userId: number) => request<Quota>('GET', `/users/${userId}/quota`),
  /** Admins only; null = no limit. */
  setQuota: (userId: number, body: QuotaLimits) => request<Quota>('PUT', `/users/${userId}/quota`, { body }),
  configSchema: () => request<Record<string, unknown>>('GET', '/config/schema'),
  configTools: () => request<ToolInfo[]>('GET', '/config/tools'),
  configExamples: () => request<ExampleConfig[]>('GET', '/config/examples'),
  validateJob: (body: { name?: string; config: Record<string, unknown>; priority?: number }, signal?: AbortSignal) =>
    request<JobValidation>('POST', '/jobs/validate', { body, signal }),
  listModels: (q: { limit?: number; offset?: number } = {}) => request<Page<RegisteredModel>>('GET', '/models', { query: q }),
  listTemplates: (q: { q?: string; limit?: number; offset?: number } = {}) =>
    request<Page<JobTemplate>>('GET', '/templates', { query: q }),
  getTemplate: (id: number) => request<JobTemplate>('GET', `/templates/${id}`),
  createTemplate: (body: { name: string; description?: string; config: Record<string, unknown>; shared?: boolean }) =>
    request<JobTemplate>('POST', '/templates', { body }),
  createSweep: (body: {
    name: string
    config: Record<string, unknown>
    grid: Record<string, unknown[]>
    seeds: number[]
    priority?: number
  }) => request<{ id: number }>('POST', '/sweeps', { body }),
  listSweeps: (q: { q?: string; limit?: number; offset?: number } = {}) =>
    request<Page<SweepSummary>>('GET', '/sweeps', { query: q }),
  getSweep: (id: number) => request<SweepDetail>('GET', `/sweeps/${id}`),
  /** Sample-by-sample: per shared benchmark the paired difference, its stderr and the McNemar p-value (409: no results). */
  compareEvaluations: (a: number, b: number, maxItems = 0) =>
    request<EvaluationComparison>('GET', '/evaluations/compare', { query: { a, b, max_items: maxItems } }),
  dashboard: () => request<Dashboard>('GET', '/monitoring/dashboard'),
  rayCluster: () => request<RayCluster>('GET', '/monitoring/ray'),

  listJobs: (q: JobListQuery = {}) =>
    request<Page<Job>>('GET', '/jobs', { query: { sort: '-created_at', ...q } as Record<string, QueryValue> }),
  getJob: (id: number) => request<Job>('GET', `/jobs/${id}`),
  createJob: (body: { name: string; config: Record<string, unknown>; priority?: number }) =>
    request<Job>('POST', '/jobs', { body }),
  cancelJob: (id: number) => request<Job>('POST', `/jobs/${id}/cancel`),
  updateJob: (id: number, body: { tags?: string[]; note?: string }) => request<Job>('PATCH', `/jobs/${id}`, { body }),
  listViews: (page: string) => request<SavedView[]>('GET', '/views', { query: { page } }),
  saveView: (body: { name: string; page: string; query: Record<string, string> }) =>
    request<SavedView>('POST', '/views', { body }),
  deleteView: (id: number) => request<null>('DELETE', `/views/${id}`),
  deleteJob: (id: number) => request<null>('DELETE', `/jobs/${id}`),
  retryJob: (id: number) => request<Job>('POST', `/jobs/${id}/retry`),
  jobEvents: (id: number) => request<JobEvent[]>('GET', `/jobs/${id}/events`),
  jobLogs: (id: number, tail = 200) => request<{ lines: string[] }>('GET', `/jobs/${id}/logs`, { query: { tail } }),
  jobMetrics: (id: number, names?: string[], maxPoints = 500, withTime = false) =>
    request<MetricsOut>('GET', `/jobs/${id}/metrics`, {
      query: {
        names: names && names.length ? names.join(',') : undefined,
        max_points: maxPoints,
        with_time: withTime || undefined,
      },
    }),
  jobCheckpoints: (id: number) => request<Checkpoint[]>('GET', `/jobs/${id}/checkpoints`),

  listEvaluations: (q: { limit?: number; offset?: number; status?: string; job_id?: number } = {}) =>
    request<Page<Evaluation>>('GET', '/evaluations', { query: q }),
  getEvaluation: (id: number) => request<EvaluationDetail>('GET', `/evaluations/${id}`),
  createEvaluation: (body: Record<string, unknown>) => request<Evaluation>('POST', '/evaluations', { body }),
  evaluationSamples: (
    id: number,
    q: { benchmark?: string; correct?: boolean; limit?: number; offset?: number } = {},
  ) => request<Page<Sample>>('GET', `/evaluations/${id}/samples`, { query: q }),
  listBenchmarks: () => request<BenchmarkInfo[]>('GET', '/evaluations/benchmarks'),
  /** The JSON Schema of POST /evaluations' body: each benchmark's own options, the generation defaults' bounds. */
  evaluationSchema: () => request<Record<string, unknown>>('GET', '/evaluations/schema'),
  scheduleSchema: () => request<Record<string, unknown>>('GET', '/schedules/schema'),
  leaderboard: (benchmark: string, q: { metric?: string; limit?: number } = {}) =>
    request<Leaderboard>('GET', '/evaluations/leaderboard', { query: { benchmark, ...q } }),

  listSchedules: (q: { limit?: number; offset?: number } = {}) => request<Page<Schedule>>('GET', '/schedules', { query: q }),
  createSchedule: (body: Record<string, unknown>) => request<Schedule>('POST', '/schedules', { body }),
  updateSchedule: (id: number, body: Record<string, unknown>) => request<Schedule>('PATCH', `/schedules/${id}`, { body }),
  runSchedule: (id: number) => request<unknown>('POST', `/schedules/${id}/run`),

  listDatasets: (q: { q?: string; owner?: string; limit?: number; offset?: number } = {}) =>
    request<Page<Dataset>>('GET', '/datasets', { query: q }),
  getDataset: (id: number) => request<Dataset>('GET', `/datasets/${id}`),
  /** 202: the file is staged; an `ingest` data job validates and stores it (its config.result names the version). */
  uploadDataset: (fields: { name: string; file: File; format?: string; policy?: 'reject' | 'quarantine'; description?: string }) =>
    postForm<IngestQueued>('/datasets', fields),
  listVersions: (id: number, q: { job_id?: number; operation?: string; limit?: number; offset?: number } = {}) =>
    request<Page<DatasetVersion>>('GET', `/datasets/${id}/versions`, { query: q }),
  getVersion: (id: number, versionId: number) =>
    request<DatasetVersionDetail>('GET', `/datasets/${id}/versions/${versionId}`),
  versionRows: (id: number, versionId: number, q: { q?: string; limit?: number; offset?: number } = {}) =>
    request<RowsPage>('GET', `/datasets/${id}/versions/${versionId}/rows`, { query: q }),
  /** The worker's audit report; a Job (202) when it is being computed (the `audit` data job). */
  versionStats: (id: number, versionId: number, refresh = false) =>
    request<DatasetStats | Job>('GET', `/datasets/${id}/versions/${versionId}/stats`, { query: { refresh: refresh || undefined } }),
  /** The registered dataset operations with their params' JSON Schemas and example params. */
  listDatasetOperations: () => request<Record<DatasetOperation, DatasetOperationInfo>>('GET', '/datasets/operations'),
  /** 202: the operation runs as a `data` job; its result is a new version whose parent is this one. */
  createOperation: (
    id: number,
    versionId: number,
    body: { operation: DatasetOperation; params: Record<string, unknown>; name?: string; priority?: number },
  ) => request<Job>('POST', `/datasets/${id}/versions/${versionId}/operations`, { body }),
  /** Quality gates: profiles (built-in, the operator's file, admin-defined). */
  listGateProfiles: () => request<Page<GateProfile>>('GET', '/gate-profiles'),
  /** 202: the gate runs as a `data` job; its config.result names the stored report. */
  runGate: (id: number, versionId: number, body: { profile: string; eval_sets?: string[]; reference?: string | null }) =>
    request<Job>('POST', `/datasets/${id}/versions/${versionId}/gate`, { body }),
  listGateReports: (id: number, versionId: number, q: { full?: boolean; limit?: number } = {}) =>
    request<Page<GateReportItem>>('GET', `/datasets/${id}/versions/${versionId}/gate-reports`, { query: q }),
}

export interface GateProfile {
  name: string
  description: string
  checks: Record<string, Record<string, unknown>>
  hash: string
  source: 'builtin' | 'file' | 'admin'
}

export interface GateCheck {
  name: string
  verdict: 'pass' | 'fail' | 'skipped'
  value: unknown
  threshold: string | null
  detail: string
  reason?: string
}

export interface GateReport {
  passed: boolean
  failed: string[]
  skipped: string[]
  checks: GateCheck[]
  profile: { name: string; hash: string }
  dataset: { path: string; sha256: string; rows: number; format: string | null }
  tokens: { unit: string; tokenizer: string | null }
  created_at: string
}

export interface GateReportItem {
  id: number
  dataset_version_id: number
  sha256: string
  profile_name: string
  profile_hash: string
  passed: boolean
  job_id: number | null
  created_at: string
  failed: string[]
  report: GateReport | null
}
