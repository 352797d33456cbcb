import { defineStore } from 'pinia'
import { ref } from 'vue'
import { api } from '../api'
import type { Dataset, DatasetOperation, DatasetVersion, IngestQueued, IngestResult, Job } from '../types'
import { ACTIVE_STATUSES } from '../types'

/** A params example per operation, prefilled in the "Run operation" form. `format` is the input version's. */
export function operationExample(op: DatasetOperation, format: string | null = null): Record<string, unknown> {
  switch (op) {
    case 'clean':
      return {
        recipe: {
          operators: [
            { op: 'fix_unicode' },
            { op: 'normalize_whitespace' },
            { op: 'turn_filter' },
            { op: 'length_filter', unit: 'words', min: 1, max: 4000 },
          ],
        },
      }
    case 'dedup':
      return { threshold: 0.8, num_perm: 128, ngram: 5, keep: 'first', exact: true, near: true }
    case 'convert':
      return { to: format === 'messages' ? 'alpaca' : 'messages' }
    case 'score':
      return { heuristics: true, by: 'quality', min: 0.3 }
    case 'decontaminate':
      return { eval_sets: ['demo/data/gsm8k_eval.jsonl'], ngram: 13 }
  }
}

export const OPERATION_HELP: Record<DatasetOperation, string> = {
  clean: 'A cleaning recipe: {"recipe": {"operators": [{"op": …}, …]}} (as the YAML recipes, in JSON); optional format, samples.',
  dedup: 'Exact and MinHash near-duplicate removal: threshold, num_perm, ngram, bands/rows, margin, keep (first|best), exact, near, seed, fields.',
  convert: 'Convert the rows to another format: {"to": FORMAT}; optional data_source, ability (verl).',
  score: 'Score rows (heuristics, perplexity_model, fields, max_length); keep rows by a score with by + min/max/top_k (lowest).',
  decontaminate: 'Drop rows sharing n-grams with eval sets: eval_sets (server paths), ngram, min_tokens, min_matches.',
}

export const useDatasetsStore = defineStore('datasets', () => {
  // The datasets table: its search and page survive leaving and coming back.
  const items = ref<Dataset[]>([])
  const total = ref(0)
  const limit = ref(20)
  const offset = ref(0)
  const q = ref('')
  const loaded = ref(false)
  /**
   * Versions by id: the list endpoint gives only `current_version_id`, so the table's rows/size/format come from
   * one request per current version. Versions are immutable: each is fetched once.
   */
  const versions = ref<Record<number, DatasetVersion>>({})

  function remember(v: DatasetVersion): void {
    versions.value[v.id] = v
  }

  async function fetchList(): Promise<void> {
    const page = await api.listDatasets({ q: q.value.trim() || undefined, limit: limit.value, offset: offset.value })
    // A page emptied by deletions: step back to the last page that has rows.
    if (page.items.length === 0 && page.total > 0 && offset.value > 0) {
      offset.value = Math.max(0, Math.floor((page.total - 1) / limit.value) * limit.value)
      return fetchList()
    }
    items.value = page.items
    total.value = page.total
    loaded.value = true
    const missing = page.items.filter((d) => d.current_version_id != null && !(d.current_version_id in versions.value))
    await Promise.all(
      missing.map((d) =>
        api
          .getVersion(d.id, d.current_version_id as number)
          .then(remember)
          .catch(() => undefined), // the table shows "—"; the dataset page reports the error
      ),
    )
  }

  /** Upload (202: the file is staged) and the ingest job that follows. */
  async function upload(fields: Parameters<typeof api.uploadDataset>[0]): Promise<IngestQueued> {
    return api.uploadDataset(fields)
  }

  /** Wait for a data job to end (polls every second); its final state. */
  async function waitJob(jobId: number, onPoll?: (job: Job) => void): Promise<Job> {
    for (;;) {
      const job = await api.getJob(jobId)
      onPoll?.(job)
      if (!ACTIVE_STATUSES.includes(job.status)) return job
      await new Promise((resolve) => setTimeout(resolve, 1000))
    }
  }

  function ingestResult(job: Job): IngestResult | null {
    const result = (job.config as { result?: IngestResult } | null)?.result
    return result ?? null
  }

  async function runOperation(
    datasetId: number,
    versionId: number,
    operation: DatasetOperation,
    params: Record<string, unknown>,
    extra: { name?: string; priority?: number } = {},
  ): Promise<Job> {
    return api.createOperation(datasetId, versionId, { operation, params, ...extra })
  }

  return { items, total, limit, offset, q, loaded, versions, remember, fetchList, upload, waitJob, ingestResult, runOperation }
})
