// Opens every view in headless Chromium, saves full-page screenshots and fails on console errors.
// Usage: node scripts/screenshots.mjs [base-url] [out-dir] [--flows] [--datasets]
//   --flows also submits a job (then cancels and retries it), an evaluation, toggles a schedule, and goes through
//   the dataset pages: a rejected and a valid upload, rows, stats, operation errors, a dedup and its job.
//   --datasets only the dataset pages (with their flow).
//   base-url: the dev server (npm run dev) or the preview server, default http://127.0.0.1:5173/ui/
//   needs a running API at the proxy target (tp up --port 8765) and a Chromium (CHROMIUM=/usr/bin/chromium).
import { mkdirSync } from 'node:fs'
import { chromium } from 'playwright-core'

const args = process.argv.slice(2).filter((a) => !a.startsWith('--'))
const DATASETS_ONLY = process.argv.includes('--datasets')
const FLOWS = process.argv.includes('--flows') || DATASETS_ONLY
const BASE = args[0] ?? 'http://127.0.0.1:5173/ui/'
const OUT = args[1] ?? 'screenshots'
mkdirSync(OUT, { recursive: true })

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', args: ['--no-sandbox'] })
const context = await browser.newContext({ viewport: { width: 1400, height: 900 } })
const page = await context.newPage()
const problems = []
page.on('console', (msg) => {
  if (msg.type() === 'error' || msg.type() === 'warning') problems.push(`${msg.type()}: ${msg.text()} (${page.url()})`)
})
page.on('pageerror', (err) => problems.push(`pageerror: ${err.message} (${page.url()})`))
page.on('requestfailed', (req) => {
  const f = req.failure()?.errorText ?? ''
  if (!f.includes('ERR_ABORTED')) problems.push(`requestfailed: ${req.url()} ${f}`)
})

async function shot(name) {
  await page.waitForTimeout(1200)
  await page.screenshot({ path: `${OUT}/${name}.png`, fullPage: true })
  console.log(`saved ${OUT}/${name}.png`)
}
const api = async (path) => (await page.request.get(new URL(`/api/v1${path}`, BASE).href)).json()

if (!DATASETS_ONLY) {
  await page.goto(BASE + '#/')
  await page.getByTestId('recent-jobs').waitFor()
  await shot('01-overview')

  await page.goto(BASE + '#/jobs')
  await page.getByTestId('jobs-table').waitFor()
  await shot('02-jobs')

  // The new-job form: a 422 shows the error list and stays; a valid config navigates to the job.
  await page.getByTestId('new-job').click()
  await page.getByTestId('job-name').fill('ui invalid')
  await page.getByTestId('job-config').fill('model: {}\nalgorithm:\n  name: sft\n')
  await page.getByTestId('job-submit').click()
  await page.getByTestId('error-list').waitFor()
  console.log('422 errors:', (await page.getByTestId('error-list').innerText()).replace(/\s+/g, ' '))
  await shot('03-jobs-new-422')
  await page.getByTestId('job-config').fill('model: [unclosed')
  await page.getByTestId('job-submit').click()
  console.log('yaml error:', (await page.getByTestId('error-list').innerText()).replace(/\s+/g, ' '))

  const jobs = await api('/jobs?limit=50')
  const train = jobs.items.find((j) => j.kind === 'train' && j.status === 'succeeded') ?? jobs.items.find((j) => j.kind === 'train')
  if (train) {
    await page.goto(BASE + `#/jobs/${train.id}`)
    await page.getByTestId('metrics-chart').waitFor()
    await page.getByTestId('checkpoints-table').waitFor()
    await shot('04-job-detail')
  }
  const running = jobs.items.find((j) => j.kind === 'train' && j.status === 'running')
  if (running) {
    await page.goto(BASE + `#/jobs/${running.id}`)
    await page.getByTestId('job-cancel').waitFor()
    await page.waitForTimeout(4000) // two refreshes of the chart
    await shot('04b-job-running')
  }
  const failed = jobs.items.find((j) => j.status === 'failed')
  if (failed) {
    await page.goto(BASE + `#/jobs/${failed.id}`)
    await page.getByTestId('job-retry').waitFor()
    await shot('05-job-failed')
  }
  const evalJob = jobs.items.find((j) => j.kind === 'eval')
  if (evalJob) {
    await page.goto(BASE + `#/jobs/${evalJob.id}`)
    await page.getByTestId('evaluation-link').waitFor()
    await shot('06-job-eval-kind')
  }

  await page.goto(BASE + '#/evaluations')
  await page.getByTestId('evaluations-table').waitFor()
  await page.getByTestId('leaderboard-table').waitFor()
  await shot('07-evaluations')
  await page.getByTestId('new-evaluation').click()
  await shot('08-evaluations-form')
  await page.getByTestId('leaderboard-benchmark').selectOption('humaneval')
  await shot('09-leaderboard-empty')

  const evals = await api('/evaluations?limit=50')
  const done = evals.items.find((e) => e.status === 'succeeded')
  if (done) {
    await page.goto(BASE + `#/evaluations/${done.id}`)
    await page.getByTestId('samples-table').waitFor()
    await shot('10-evaluation-detail')
    await page.getByTestId('samples-filter').selectOption('wrong')
    await shot('11-evaluation-wrong')
  }

  await page.goto(BASE + '#/schedules')
  await page.getByTestId('schedules-table').waitFor()
  await shot('12-schedules')

  if (FLOWS) {
    page.on('dialog', (d) => d.accept())
    // Schedules: the enabled switch PATCHes the schedule.
    const sched = (await api('/schedules')).items[0]
    if (sched) {
      await page.goto(BASE + '#/schedules')
      const toggle = page.getByTestId(`schedule-toggle-${sched.id}`)
      await toggle.waitFor({ state: 'attached' })
      await page.locator(`[data-testid="schedule-row-${sched.id}"] .switch`).click()
      await page.waitForTimeout(800)
      const after = (await api('/schedules')).items.find((x) => x.id === sched.id)
      console.log(`schedule ${sched.id} enabled: ${sched.enabled} -> ${after.enabled}`)
      await shot('14-schedule-toggled')
      await page.locator(`[data-testid="schedule-row-${sched.id}"] .switch`).click()
      await page.waitForTimeout(800)
    }
    // A valid job: 201 -> the job page; then cancel and retry it.
    await page.goto(BASE + '#/jobs')
    await page.getByTestId('new-job').click()
    await page.getByTestId('job-name').fill('ui submitted job')
    const tpl = await page.getByTestId('job-config').inputValue()
    await page.getByTestId('job-config').fill(tpl.replace('max_steps: 200', 'max_steps: 30'))
    await page.getByTestId('job-submit').click()
    await page.waitForURL(/#\/jobs\/\d+$/)
    console.log('submitted job ->', page.url())
    await page.getByTestId('job-cancel').click()
    await page.getByTestId('job-retry').waitFor({ timeout: 60000 })
    console.log('after cancel:', await page.getByTestId('job-status').innerText())
    await page.getByTestId('job-retry').click()
    await page.waitForFunction(() => !['cancelled', 'failed'].includes(document.querySelector('[data-testid="job-status"]')?.textContent?.trim() ?? ''))
    console.log('after retry:', await page.getByTestId('job-status').innerText())
    await shot('15-job-retried')
    // An evaluation of a model: 201 -> the evaluation page, which fills in when it finishes.
    await page.goto(BASE + '#/evaluations')
    await page.getByTestId('new-evaluation').click()
    await page.getByTestId('eval-model').fill('demo-tiny')
    await page.getByTestId('evaluation-submit').click()
    await page.waitForURL(/#\/evaluations\/\d+$/)
    console.log('submitted evaluation ->', page.url())
    await page.locator('[data-testid="eval-metrics"] tbody tr[data-testid^="eval-metric-"]').first().waitFor({ timeout: 120000 })
    await shot('16-evaluation-submitted')
    // A 422 from the evaluations endpoint.
    await page.goto(BASE + '#/evaluations')
    await page.getByTestId('new-evaluation').click()
    await page.getByTestId('eval-model').fill('demo-tiny')
    await page.getByTestId('eval-benchmarks').fill('[{"name": "nope"}]')
    await page.getByTestId('evaluation-submit').click()
    await page.getByTestId('error-list').waitFor()
    console.log('eval 422:', (await page.getByTestId('error-list').innerText()).replace(/\s+/g, ' '))
  }
}

// ---- datasets ----
/** JSONL text: `n` chat rows about sums, `dups` of them repeated verbatim (for dedup), optional bad rows. */
function chatRows(n, dups = 0, bad = false) {
  const rows = []
  for (let i = 0; i < n; i++) {
    const a = (i * 7) % 50
    const b = (i * 13) % 40
    rows.push({
      messages: [
        { role: 'user', content: `Question ${i}: what is ${a} plus ${b}? Reply with the sum and one short sentence of reasoning.` },
        { role: 'assistant', content: `${a} plus ${b} is ${a + b}, because adding ${b} to ${a} gives ${a + b}.` },
      ],
    })
  }
  for (let i = 0; i < dups; i++) rows.push(rows[(i * 3) % n])
  const lines = rows.map((r) => JSON.stringify(r))
  if (bad) lines.splice(2, 0, '{"messages": 3}', 'not json at all', '{"messages": [{"role": "user", "content": ""}]}')
  return lines.join('\n') + '\n'
}

const errorText = async () => (await page.getByTestId('error-list').first().innerText()).replace(/\s+/g, ' ')

async function datasetPages() {
  await page.goto(BASE + '#/datasets')
  await page.getByTestId('datasets-table').waitFor()
  await shot('20-datasets')
  if (FLOWS) {
    // A rejected upload: 422 with the bad rows, shown in the form.
    await page.getByTestId('new-dataset').click()
    await page.getByTestId('dataset-file').setInputFiles({ name: 'ui-bad.jsonl', mimeType: 'application/json', buffer: Buffer.from(chatRows(10, 0, true)) })
    await page.getByTestId('dataset-submit').click()
    await page.getByTestId('error-list').waitFor()
    console.log('upload 422:', await errorText())
    await shot('21-dataset-upload-422')
    // A valid upload (with duplicates, so dedup has work): 201 -> the dataset page on the new version.
    await page.getByTestId('dataset-name').fill(`ui-sums-${Date.now() % 100000}`)
    await page.getByTestId('dataset-file').setInputFiles({ name: 'ui-sums.jsonl', mimeType: 'application/json', buffer: Buffer.from(chatRows(120, 30)) })
    await page.getByTestId('dataset-submit').click()
    await page.waitForURL(/#\/datasets\/\d+\?v=\d+/)
    console.log('uploaded ->', page.url())
  }
  const datasets = await api('/datasets?limit=50')
  const ds = FLOWS ? datasets.items.find((d) => page.url().includes(`#/datasets/${d.id}?`)) : datasets.items[0]
  if (!ds) return
  if (!FLOWS) await page.goto(BASE + `#/datasets/${ds.id}`)
  await page.getByTestId('versions-table').waitFor()
  await page.locator('[data-testid="rows-table"] tbody tr[data-testid^="row-"]').first().waitFor()
  await page.getByTestId('stats-summary').waitFor()
  await shot('22-dataset-detail')
  if (!FLOWS) return

  // Rows: search, expand one.
  const searched = page.waitForResponse((r) => r.url().includes('/rows?') && r.url().includes('q=plus'))
  await page.getByTestId('rows-search').fill('plus 12')
  await searched
  await page.waitForTimeout(300)
  console.log('rows matching "plus 12":', (await page.locator('[data-testid="rows-table"] tbody tr[data-testid^="row-"]').count()))
  await page.getByTestId('row-expand').first().click()
  await page.getByTestId('stats-distribution').selectOption({ index: 1 })
  await shot('23-dataset-rows-search')
  await page.getByTestId('rows-search').fill('')

  // Operation errors: a JSON syntax error (client side), then field errors from the API (422).
  const form = page.getByTestId('operation-form')
  await page.getByTestId('operation-name').selectOption('dedup')
  await page.getByTestId('operation-params').fill('{"threshold": 0.8,')
  await page.getByTestId('operation-submit').click()
  await form.getByTestId('error-list').waitFor()
  console.log('params syntax error:', (await form.getByTestId('error-list').innerText()).replace(/\s+/g, ' '))
  await page.getByTestId('operation-params').fill('{"threshold": 2, "ngram": 0, "bogus": true}')
  const rejected = page.waitForResponse((r) => r.url().includes('/operations') && r.status() === 422)
  await page.getByTestId('operation-submit').click()
  await rejected
  await page.waitForTimeout(200)
  console.log('operation 422:', (await form.getByTestId('error-list').innerText()).replace(/\s+/g, ' '))
  await form.scrollIntoViewIfNeeded()
  await shot('24-dataset-operation-422')

  // A dedup from the example params: 202 -> the job link; the new version appears when it finishes.
  await page.getByTestId('operation-example').click()
  await page.getByTestId('operation-submit').click()
  await page.getByTestId('operation-job-link').waitFor()
  console.log('operation job:', await page.getByTestId('operation-job-link').innerText())
  await page.getByTestId('operation-result').waitFor({ timeout: 120000 })
  console.log('operation result:', (await page.getByTestId('operation-result').innerText()).replace(/\s+/g, ' '))
  if (await page.getByTestId('operation-version-link').count()) {
    await page.getByTestId('operation-version-link').click()
    await page.locator('[data-testid="lineage"] li').nth(1).waitFor()
    await page.getByTestId('stats-summary').waitFor()
    console.log('lineage:', (await page.getByTestId('lineage').innerText()).replace(/\s+/g, ' '))
  }
  await shot('25-dataset-after-dedup')

  // Follow the job link.
  await page.getByTestId('operation-job-link').click()
  await page.waitForURL(/#\/jobs\/\d+$/)
  await page.getByTestId('job-status').waitFor()
  console.log('job page:', page.url(), await page.getByTestId('job-status').innerText())
  await page.getByTestId('dataset-link').waitFor()
  await shot('26-dataset-job')

  await page.goto(BASE + '#/datasets')
  await page.getByTestId(`dataset-row-${ds.id}`).waitFor()
  await shot('27-datasets-after')

  // The same content again under the same name: 200 with the existing version, said on the dataset page.
  await page.getByTestId('new-dataset').click()
  await page.getByTestId('dataset-name').fill(ds.name)
  await page.getByTestId('dataset-file').setInputFiles({ name: 'again.jsonl', mimeType: 'application/json', buffer: Buffer.from(chatRows(120, 30)) })
  await page.getByTestId('dataset-submit').click()
  await page.getByTestId('upload-existing').waitFor()
  console.log('re-upload:', (await page.getByTestId('upload-existing').innerText()).replace(/\s+/g, ' '))
}

await datasetPages()

// The token prompt: the API answers 401 unless the right bearer token is sent.
await page.route('**/api/v1/**', async (route) => {
  if (route.request().headers()['authorization'] === 'Bearer s3cret') return route.continue()
  return route.fulfill({ status: 401, contentType: 'application/json', body: '{"detail":"missing or invalid token"}' })
})
await page.goto(BASE + '#/jobs')
await page.getByTestId('token-input').waitFor()
await shot('13-token-prompt')
await page.getByTestId('token-input').fill('s3cret')
await page.getByTestId('token-save').click()
await page.getByTestId('jobs-table').locator('tbody tr').first().waitFor()
console.log('token saved:', await page.evaluate(() => localStorage.getItem('tp_token')))
await page.unroute('**/api/v1/**')
await page.evaluate(() => localStorage.removeItem('tp_token'))

await browser.close()
// The intercepted 401s are expected; anything else is a problem.
const real = problems.filter((p) => !p.includes('status of 401') && !p.includes('status of 422'))
console.log(real.length ? `PROBLEMS:\n${real.join('\n')}` : 'no console errors')
process.exit(real.length ? 1 : 0)
