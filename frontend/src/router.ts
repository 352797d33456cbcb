import { createRouter, createWebHashHistory } from 'vue-router'
import OverviewView from './views/OverviewView.vue'

export const router = createRouter({
  history: createWebHashHistory(),
  routes: [
    { path: '/', name: 'overview', component: OverviewView, meta: { title: 'Overview' } },
    { path: '/jobs', name: 'jobs', component: () => import('./views/JobsView.vue'), meta: { title: 'Jobs' } },
    { path: '/launch', name: 'launch', component: () => import('./views/LaunchView.vue'), meta: { title: 'Launch' } },
    { path: '/playground', name: 'playground', component: () => import('./views/PlaygroundView.vue'), meta: { title: 'Playground' } },
    {
      path: '/jobs/:id(\\d+)',
      name: 'job',
      component: () => import('./views/JobDetailView.vue'),
      props: (route) => ({ id: Number(route.params.id) }),
      meta: { title: 'Job' },
    },
    { path: '/compare', name: 'compare', component: () => import('./views/CompareView.vue'), meta: { title: 'Compare' } },
    { path: '/evaluations', name: 'evaluations', component: () => import('./views/EvaluationsView.vue'), meta: { title: 'Evaluations' } },
    {
      path: '/evaluations/:id(\\d+)',
      name: 'evaluation',
      component: () => import('./views/EvaluationDetailView.vue'),
      props: (route) => ({ id: Number(route.params.id) }),
      meta: { title: 'Evaluation' },
    },
    { path: '/datasets', name: 'datasets', component: () => import('./views/DatasetsView.vue'), meta: { title: 'Datasets' } },
    {
      path: '/datasets/:id(\\d+)',
      name: 'dataset',
      component: () => import('./views/DatasetDetailView.vue'),
      props: (route) => ({ id: Number(route.params.id) }),
      meta: { title: 'Dataset' },
    },
    { path: '/schedules', name: 'schedules', component: () => import('./views/SchedulesView.vue'), meta: { title: 'Schedules' } },
    { path: '/usage', name: 'usage', component: () => import('./views/UsageView.vue'), meta: { title: 'Usage' } },
    { path: '/:pathMatch(.*)*', name: 'not-found', component: () => import('./views/NotFoundView.vue'), meta: { title: 'Not found' } },
  ],
})

router.afterEach((to) => {
  const title = (to.meta.title as string | undefined) ?? ''
  const id = to.params.id ? ` ${to.params.id}` : ''
  document.title = `${title}${id} · training_platform`
})
