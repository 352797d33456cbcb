// Shapes of the /api/v1 JSON (checked against the server's OpenAPI schema).

export type JobStatus = 'queued' | 'preflight' | 'running' | 'succeeded' | 'failed' | 'cancelled'
export const JOB_STATUSES: JobStatus[] = ['queued', 'preflight', 'running', 'succeeded', 'failed', 'cancelled']
export const ACTIVE_STATUSES: string[] = ['queued', 'preflight', 'running']
export const FINISHED_STATUSES: string[] = ['succeeded', 'failed', 'cancelled']

export interface Page<T> {
  items: T[]
  total: number
  limit: number
  offset: number
}

export interface PreflightCheck {
  name: string
  ok: boolean
  detail?: string
}

export interface Job {
  id: number
  name: string
  owner: string
  kind: 'train' | 'data' | 'eval' | string
  algorithm: string
  status: JobStatus | string
  priority: number
  attempts: number
  worker: string | null
  heartbeat_at: string | null
  current_step: number
  max_steps: number | null
  run_dir: string | null
  error: string | null
  preflight: { ok?: boolean; checks?: PreflightCheck[]; errors?: unknown[]; seconds?: number } | null
  cancel_requested: boolean
  created_at: string
  updated_at: string
  started_at: string | null
  finished_at: string | null
  config: Record<string, unknown>
  cloned_from: number | null
  best_checkpoint: Record<string, unknown> | null
  warning?: string | null
  distributed?: Distributed | null
  tags: string[]
  note: string
  summary: JobSummary | null
  /** where its current or last attempt was admitted ("node:<host>" or "ray"), the device type and how many */
  pool?: string | null
  device?: string | null
  devices?: number | null
  /** non-null only while queued: its place in the training queue and why it waits */
  queue?: JobQueue | null
  /** GET /jobs/{id} only: the devices and time its attempts used (null before it first ran) */
  usage?: JobUsage | null
}

/** A queued job's place in the training queue (1-based) and why it waits ("quota: bob runs 1 of 1 devices"). */
export interface JobQueue {
  position: number
  reason: string
}

/** What a job's attempts used: devices x wall time, CPU time and peak memory of its processes, priced. */
export interface JobUsage {
  /** device type: cuda, cpu, ... */
  device: string
  devices: number
  device_seconds: number
  device_hours: number
  cpu_seconds: number
  peak_memory_bytes: number
  /** device-hours x the device type's price (TP_DEVICE_HOUR_COST); 0 when none is set */
  cost: number
  attempts: number
  /** an attempt is still running: the figures grow */
  running: boolean
}

/** The runs table's columns: a job's last logged values and its best checkpoint evaluation. */
export interface JobSummary {
  last_loss: number | null
  best_eval: { metric: string; value: number; step: number } | null
  last_reward: number | null
  last_step: number | null
}

export interface SavedView {
  id: number
  name: string
  page: string
  query: Record<string, string>
  created_at: string
}

export interface RankState {
  rank: number
  node: number
  state: 'pending' | 'running' | 'finished' | 'failed' | 'cancelled' | string
  error: string | null
  log: string
}

export interface WorkerPlacement {
  actor: string
  name: string | null
  node_id: string | null
  node_ip: string | null
  pid: number | null
}

export interface Distributed {
  launcher: 'local' | 'torchrun' | 'ray' | string
  num_nodes: number
  processes_per_node: number
  world_size: number
  restarts: number
  ranks: RankState[]
  workers?: WorkerPlacement[]
}

export interface JobEvent {
  id: number
  ts: string
  from_status: string | null
  to_status: string
  reason: string
}

export interface Checkpoint {
  step: number
  path: string
  sha256: string
  size_bytes: number
  removed: boolean
  created_at: string
  evaluation_id: number | null
  eval_metrics: Record<string, number>
  is_best: boolean
}

export type Point = [number, number | null]

export interface MetricsOut {
  series: Record<string, Point[]>
  names_available: string[]
  downsampled?: Record<string, boolean>
  /** with_time: when each point was logged (epoch seconds), aligned with series */
  times?: Record<string, (number | null)[]> | null
}

export interface MetricValue {
  value: number
  stderr: number | null
  ci95: number[]
  n: number
}

/** Where an evaluation runs: local (one eval worker) or ray (its items sharded over Ray actors). */
export interface EvaluationExecutor {
  name: string
  /** local: 1; ray: null until it runs when the cluster's default is used */
  workers: number | null
  requested: string | null
  reason: string | null
  /** ray: per worker and stage of its current benchmark */
  progress: { worker: number; benchmark: string; stage: string; done: number; total: number }[]
}

/** A data job's progress on Ray (`config.ray_progress`, written by the data worker from its Ray Data driver). */
export interface RayProgress {
  stage: string
  /** blocks done and in all */
  done: number
  total: number
  /** blocks done per Ray worker process ("host:pid") */
  workers: Record<string, number>
}

/** Where a data job (a dataset operation) runs: `config.executor` (local or ray) and, on Ray, its progress. */
export interface DataExecutor {
  name: string
  /** why it runs there, when the job's config says */
  reason: string | null
  /** local: 1; ray: the workers that reported blocks (null before the first) */
  workers: number | null
  progress: RayProgress | null
}

export interface Evaluation {
  id: number
  name: string
  owner: string
  status: string
  progress: number
  error: string | null
  model: string
  model_path: string
  source_job_id: number | null
  checkpoint_step: number | null
  schedule_id: number | null
  benchmarks: string[]
  keep_best_by: string | null
  executor: EvaluationExecutor
  metrics: Record<string, MetricValue>
  created_at: string
  started_at: string | null
  finished_at: string | null
  warning?: string | null
}

export interface EvaluationDetail extends Evaluation {
  config: Record<string, unknown>
  preflight: Record<string, unknown> | null
  output_dir: string | null
  summary: Record<string, unknown> | null
}

export interface Sample {
  benchmark: string
  position: number
  item_id: string
  sample_index: number
  correct: boolean | null
  extracted: string | null
  reference: string | null
  output: string
  prompt: string
  latency_s: number | null
  extra: Record<string, unknown>
}

export interface LeaderboardEntry {
  rank: number
  evaluation_id: number
  model: string
  model_path: string
  source_job_id: number | null
  checkpoint_step: number | null
  value: number
  stderr: number | null
  ci95: number[]
  n: number
  data_sha256: string | null
  evaluated_at: string | null
}

/** GET /evaluations/benchmarks: the registered benchmarks. */
export interface BenchmarkInfo {
  name: string
  kind: string
  primary_metric: string
  bundled_data: boolean
  data_help: string
}

export interface Leaderboard extends Page<LeaderboardEntry> {
  benchmark: string
  metric: string
}

export interface Schedule {
  id: number
  name: string
  owner: string
  enabled: boolean
  trigger: 'cron' | 'on_new_checkpoint' | string
  cron: string | null
  job_id: number | null
  model: string | null
  every_n: number
  keep_best_by: string | null
  priority: number
  request: Record<string, unknown>
  next_fire_at: string | null
  last_fired_at: string | null
  last_checkpoint_step: number
  fired_count: number
  last_message: string | null
  evaluations: number
  created_at: string
  updated_at: string
}

export interface WorkerInfo {
  name: string
  job_id: number | null
  status: string
  heartbeat_at: string | null
  alive: boolean
}

export interface GpuInfo {
  index: number
  name: string
  memory_total_mb?: number
  memory_used_mb?: number
}

export interface Dashboard {
  jobs_by_status: Record<string, number>
  queue_depth: { train?: number; data?: number; eval?: number; broker?: Record<string, number | null> | null; [k: string]: unknown }
  workers: WorkerInfo[]
  system: {
    cpu_percent?: number | null
    cpu_count?: number | null
    load_avg?: number[] | null
    memory?: { total_mb: number; available_mb: number; used_mb: number; percent: number } | null
    disk?: { path: string; total_mb: number; free_mb: number; used_mb: number; percent: number } | null
  }
  gpus: GpuInfo[]
}

export interface RayResource {
  total: number
  used: number
}

export interface RayNode {
  node_id: string
  ip: string | null
  state: string
  is_head: boolean
  resources: { CPU: RayResource; GPU: RayResource }
}

/** GET /monitoring/ray: `configured: false` when TP_RAY_ADDRESS is unset; address, nodes and dashboard for admins. */
export interface RayCluster {
  configured: boolean
  checked_at?: string
  error?: string | null
  nodes_alive?: number
  cpus?: RayResource
  gpus?: RayResource
  address?: string
  dashboard_url?: string | null
  nodes?: RayNode[]
}

export interface User {
  id: number
  name: string
  is_admin: boolean
  created_at: string
}

// ---- sharing the devices: usage and quotas ----

export type UsageGroupBy = 'user' | 'job' | 'device'
export const USAGE_GROUPS: UsageGroupBy[] = ['user', 'job', 'device']

/** The figures of one row of GET /usage (and of its total). */
export interface UsageFigures {
  device_hours: number
  device_seconds: number
  jobs: number
  cost: number
  cpu_hours: number
  peak_memory_bytes: number
}

export interface UsageRow extends UsageFigures {
  key: string
  /** group_by=user; the user's name also for group_by=job */
  user_id?: number
  user?: string
  /** group_by=job */
  job_id?: number
  job_name?: string
  /** group_by=device */
  device?: string
}

/** Device-hours of one user on one (UTC) day. */
export interface UsageDaily {
  date: string
  user: string
  user_id: number
  device_hours: number
}

/** GET /usage: non-admins see their own usage only, admins everyone's. */
export interface UsageReport {
  since: string
  until: string
  group_by: UsageGroupBy
  /** price of a device-hour per device type (empty: no prices configured) */
  prices: Record<string, number>
  rows: UsageRow[]
  total: UsageFigures
  daily: UsageDaily[]
}

/** The limits one user may use at once and per week; null = no limit. */
export interface QuotaLimits {
  max_devices: number | null
  max_running_jobs: number | null
  device_hours_per_week: number | null
}

/** GET /users/{id}/quota: the limits (an admin's, or the platform's defaults) and what is in use now. */
export interface Quota extends QuotaLimits {
  user_id: number
  user: string
  source: 'user' | 'default' | string
  used: { devices: number; running_jobs: number; device_hours_week: number }
  /** when device-hours of the last 7 days start to drop out of the weekly budget (null: none used) */
  week_frees_up_at: string | null
}

// ---- datasets (content-addressed immutable versions with lineage) ----

/** Row formats the server knows (upload `format`, convert `to`); `verl` is rl_prompt for verl. */
export const DATA_FORMATS = ['messages', 'sharegpt', 'alpaca', 'prompt_completion', 'text', 'preference', 'kto', 'rl_prompt', 'verl']
/** A registered dataset operation's name (the server's registry: GET /datasets/operations lists them). */
export type DatasetOperation = string
/** One entry of GET /datasets/operations. */
export interface DatasetOperationInfo {
  description: string
  /** JSON Schema of its `params` (defaults included) */
  params_schema: Record<string, unknown>
  /** the params the form starts from; `example_by_format[format]` when the input version has that format */
  example: Record<string, unknown>
  example_by_format: Record<string, Record<string, unknown>>
}

export interface Dataset {
  id: number
  name: string
  owner: string
  description: string
  current_version_id: number | null
  version_count: number
  created_at: string
  updated_at: string
}

export interface DatasetVersion {
  id: number
  dataset_id: number
  sha256: string
  /** relative to TP_DATA_DIR: usable as `data.train_file` in a job config */
  path: string
  format: string | null
  rows: number
  size_bytes: number
  /** field -> JSON type(s) */
  schema: Record<string, unknown>
  stats: Record<string, unknown>
  parent_version_id: number | null
  /** upload | register | clean | dedup | convert | score | decontaminate */
  operation: string
  /** the operation's parameters (normalised), or the upload's filename/policy/format */
  recipe: Record<string, unknown> | null
  job_id: number | null
  created_at: string
}

export interface LineageItem {
  id: number
  sha256: string
  operation: string
  recipe: Record<string, unknown> | null
  job_id: number | null
  parent_version_id: number | null
  rows: number
  created_at: string
}

export interface DatasetVersionDetail extends DatasetVersion {
  report: Record<string, unknown> | null
  /** ancestors, nearest first, up to the root upload/register */
  lineage: LineageItem[]
  audit_cached: boolean
}

/** 202 to an upload or a registration: the dataset and the `ingest` data job that validates and stores the file. */
export interface IngestQueued {
  dataset: Dataset
  job: Job
  staged_bytes: number
}

/** What an ingest job records in `config.result` when it ends. */
export interface IngestResult {
  accepted: boolean
  dataset_id?: number
  version_id?: number
  /** false: the dataset already had this content (its version) */
  created?: boolean
  rows?: number
  bad_rows?: number
  policy?: string
  stored?: boolean
  /** a refusal: the problems, `line N: field` first */
  detail?: { loc: string; msg: string }[]
}

export interface DatasetRow {
  /** 0-based row index */
  index: number
  /** 1-based line (JSONL) or record number */
  line: number
  row: unknown
}

export interface RowsPage extends Page<DatasetRow> {
  q: string | null
  /** false: a search stopped after its scan limit; total counts the matches so far */
  complete?: boolean
}

/** One distribution of the audit report: summary numbers and a histogram (edges has counts.length + 1 entries). */
export interface Distribution {
  count: number
  mean?: number
  std?: number
  min?: number
  p10?: number
  p50?: number
  p90?: number
  p99?: number
  max?: number
  histogram?: { edges: number[]; counts: number[] }
  counts?: Record<string, number>
}

/** GET .../stats: the audit report. Only the parts the UI reads are typed; the rest is shown as key/value. */
export interface DatasetStats {
  version_id?: number
  sha256?: string
  cached?: boolean
  format?: string | null
  rows?: number
  definitions?: Record<string, string>
  stats?: Record<string, Distribution | number | string | null>
  distinct_1?: number
  distinct_2?: number
  ngram_entropy?: Record<string, number>
  difficulty?: { features?: Record<string, Distribution>; score?: Distribution; thresholds?: Record<string, number>; buckets?: Record<string, number> }
  difficulty_buckets?: Record<string, number>
  duplicates?: Record<string, unknown>
  duplicate_rate?: number
  seconds?: number
  [key: string]: unknown
}
