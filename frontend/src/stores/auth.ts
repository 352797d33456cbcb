import { defineStore } from 'pinia'
import { ref } from 'vue'
import { api, getToken, onUnauthorized, setToken } from '../api'
import type { User } from '../types'

export const useAuthStore = defineStore('auth', () => {
  const token = ref<string | null>(getToken())
  /** True after a 401: the app shows the token prompt. */
  const needsToken = ref(false)
  /** Bumped when the token changes, so the views remount and load again with it. */
  const generation = ref(0)
  const user = ref<User | null>(null)

  onUnauthorized(() => {
    needsToken.value = true
  })

  async function loadUser(): Promise<void> {
    try {
      user.value = await api.me()
    } catch {
      user.value = null
    }
  }

  function save(newToken: string): void {
    const t = newToken.trim()
    setToken(t || null)
    token.value = t || null
    needsToken.value = false
    generation.value++
    void loadUser()
  }

  function signOut(): void {
    setToken(null)
    token.value = null
    user.value = null
    generation.value++
    void loadUser()
  }

  return { token, needsToken, generation, user, loadUser, save, signOut }
})
