// The state both evaluation forms share (a new evaluation, a new evaluation schedule): the request's JSON Schema
// (GET /evaluations/schema or /schedules/schema), the benchmark registry, what the user set (`values`: only what
// they set, as the body will carry it), the pickers' items (registered models and training jobs, the user's own
// first, marked `mine`), a job's checkpoints, and the server's 422 errors by field path (a field's error is dropped
// as soon as that field changes; errors with no field on the form are listed apart).
import { computed, ref } from 'vue'
import { api, toErrorItems, type ErrorItem } from '../api'
import type { PickerItem } from '../components/EntityPicker.vue'
import { EMPTY_MEANS, evalFormDefaults } from '../evalDefaults'
import { clearErrorsAt, errorsByPath, fieldsOf, getIn, setIn, type FieldSpec, type Schema } from '../schemaForm'
import { useAuthStore } from '../stores/auth'
import { useEvaluationsStore } from '../stores/evaluations'

export function useEvalForm(fetchSchema: () => Promise<Record<string, unknown>>, initial: Record<string, unknown> = {}) {
  const auth = useAuthStore()
  const evaluations = useEvaluationsStore()

  const schema = ref<Schema | null>(null)
  const loadErrors = ref<ErrorItem[]>([])
  const values = ref<Record<string, unknown>>({})
  const fieldErrors = ref<Record<string, string>>({})
  const generalErrors = ref<ErrorItem[]>([])
  const modelItems = ref<PickerItem[]>([])
  const jobItems = ref<PickerItem[]>([])
  const checkpointSteps = ref<number[]>([])

  function reset() {
    const d = evalFormDefaults()
    values.value = { benchmarks: d.benchmarks, ...(Object.keys(d.generation).length ? { generation: d.generation } : {}), ...initial }
    fieldErrors.value = {}
    generalErrors.value = []
  }
  reset()

  let loading: Promise<void> | null = null
  function load(): Promise<void> {
    loading ??= (async () => {
      try {
        const [s] = await Promise.all([fetchSchema(), evaluations.fetchBenchmarks()])
        schema.value = s as Schema
        loadErrors.value = []
      } catch (err) {
        loading = null
        loadErrors.value = toErrorItems(err)
        return
      }
      await loadTargets()
    })()
    return loading
  }

  async function loadTargets() {
    if (!auth.user) await auth.loadUser()
    const me = auth.user?.name
    const [models, jobs] = await Promise.allSettled([
      api.listModels({ limit: 200 }),
      api.listJobs({ kind: 'train', limit: 200 }),
    ])
    if (models.status === 'fulfilled') {
      modelItems.value = models.value.items.map((m) => ({
        value: m.name,
        label: m.name,
        detail: [m.path, m.owner && m.owner !== me ? m.owner : '', m.shared ? 'shared' : ''].filter(Boolean).join(' · '),
        mine: !!me && m.owner === me,
      }))
    }
    if (jobs.status === 'fulfilled') {
      jobItems.value = jobs.value.items.map((j) => ({
        value: String(j.id),
        label: `#${j.id} ${j.name}`,
        detail: [j.status, j.algorithm, `step ${j.current_step}${j.max_steps ? ` of ${j.max_steps}` : ''}`, j.owner !== me ? j.owner : '']
          .filter(Boolean)
          .join(' · '),
        mine: !!me && j.owner === me,
      }))
    }
  }

  let checkpointsFor = ''
  async function loadCheckpoints(jobId: string) {
    checkpointsFor = jobId
    if (!/^\d+$/.test(jobId)) {
      checkpointSteps.value = []
      return
    }
    try {
      const rows = await api.jobCheckpoints(Number(jobId))
      if (checkpointsFor === jobId) checkpointSteps.value = rows.filter((c) => !c.removed).map((c) => c.step).sort((a, b) => b - a)
    } catch {
      if (checkpointsFor === jobId) checkpointSteps.value = []
    }
  }

  function get(path: (string | number)[]): unknown {
    return getIn(values.value, path)
  }

  /** Set (or, with undefined, remove) what the user set at `path`; the errors of that field go. */
  function update(path: (string | number)[], value: unknown) {
    values.value = setIn(values.value, path, value)
    clearErrors(path)
  }

  function clearErrors(path: (string | number)[]) {
    fieldErrors.value = clearErrorsAt(fieldErrors.value, path)
  }

  /** A failed submission's errors: at their fields when `onForm(loc)` says the form shows that field, else listed. */
  function showErrors(err: unknown, onForm: (loc: string) => boolean) {
    const items = toErrorItems(err)
    const placed = items.filter((e) => e.loc && onForm(e.loc))
    fieldErrors.value = errorsByPath(placed)
    generalErrors.value = items.filter((e) => !placed.includes(e))
  }

  /** The generation defaults' fields (GenerationDefaults: BenchmarkSpec's bounds and help, from the schema). */
  const generationFields = computed<FieldSpec[]>(() => {
    const root = schema.value
    if (!root?.properties?.generation) return []
    return fieldsOf(root, root.properties.generation, ['generation']).map((f) => ({
      ...f,
      placeholder: f.default === undefined || f.default === null ? (EMPTY_MEANS[f.key] ?? "each benchmark's default") : undefined,
    }))
  })

  const problemCount = computed(() => Object.keys(fieldErrors.value).length)

  /** The metric keys of the chosen benchmarks' primary metrics ("gsm8k/accuracy"), for keep_best_by. */
  const metricKeys = computed(() => {
    const chosen = (values.value.benchmarks as Record<string, unknown>[] | undefined) ?? []
    return chosen
      .map((b) => evaluations.benchmarks.find((info) => info.name === b.name))
      .filter((info) => info !== undefined)
      .map((info) => `${info.name}/${info.primary_metric}`)
  })

  return {
    schema,
    loadErrors,
    values,
    fieldErrors,
    generalErrors,
    problemCount,
    modelItems,
    jobItems,
    checkpointSteps,
    metricKeys,
    generationFields,
    registry: computed(() => evaluations.benchmarks),
    load,
    reset,
    get,
    update,
    clearErrors,
    showErrors,
    loadCheckpoints,
  }
}
