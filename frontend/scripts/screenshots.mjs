// Opens every view in headless Chromium, saves full-page screenshots and fails on console errors.
// Usage: node scripts/screenshots.mjs [base-url] [out-dir] [--flows]
//   --flows also submits a job (then cancels and retries it), an evaluation, and toggles a schedule.
//   base-url: the dev server (npm run dev) or the preview server, default http://127.0.0.1:5173/ui/
//   needs a running API at the proxy target (tp up --port 8765) and a Chromium (CHROMIUM=/usr/bin/chromium).
import { mkdirSync } from 'node:fs'
import { chromium } from 'playwright-core'

const args = process.argv.slice(2).filter((a) => !a.startsWith('--'))
const FLOWS = process.argv.includes('--flows')
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
