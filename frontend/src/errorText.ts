// Server error messages a person can read. The platform translates most validation errors itself
// (core/errors.py: "must be >= 1, got 0"), but a few of pydantic's own sentences still come through ("List should
// have at least 1 item after validation, got []"). parseErrorBody (api.ts) passes every {loc, msg} through
// humanizeError, so every page shows the readable form; a rule for one field (loc) comes before the general ones.

interface Rule {
  /** The last part of the field path this rule is for (`benchmarks`), or any field when absent. */
  field?: string
  pattern: RegExp
  text: (m: RegExpMatchArray) => string
}

const plural = (n: string, word: string) => `${n} ${word}${n === '1' ? '' : 's'}`

const RULES: Rule[] = [
  { field: 'benchmarks', pattern: /^List should have at least \d+ items? after validation/i, text: () => 'choose at least one benchmark' },
  { field: 'benchmarks', pattern: /^(Field required|required field is missing)/i, text: () => 'choose at least one benchmark' },
  { pattern: /^List should have at least (\d+) items? after validation/i, text: (m) => `give at least ${plural(m[1], 'item')}` },
  { pattern: /^List should have at most (\d+) items? after validation/i, text: (m) => `give at most ${plural(m[1], 'item')}` },
  { pattern: /^String should have at least (\d+) characters?/i, text: (m) => (m[1] === '1' ? 'must not be empty' : `must be at least ${m[1]} characters`) },
  { pattern: /^String should have at most (\d+) characters?/i, text: (m) => `must be at most ${m[1]} characters` },
  { pattern: /^Field required$/i, text: () => 'required field is missing' },
  { pattern: /^Extra inputs are not permitted/i, text: () => 'unknown field' },
  { pattern: /^Input should be greater than or equal to ([^,]+)/i, text: (m) => `must be at least ${m[1]}` },
  { pattern: /^Input should be greater than ([^,]+)/i, text: (m) => `must be more than ${m[1]}` },
  { pattern: /^Input should be less than or equal to ([^,]+)/i, text: (m) => `must be at most ${m[1]}` },
  { pattern: /^Input should be less than ([^,]+)/i, text: (m) => `must be less than ${m[1]}` },
  { pattern: /^Input should be a valid integer/i, text: () => 'must be a whole number' },
  { pattern: /^Input should be a valid number/i, text: () => 'must be a number' },
  { pattern: /^Input should be a valid boolean/i, text: () => 'must be true or false' },
  { pattern: /^Input should be a valid string/i, text: () => 'must be text' },
  { pattern: /^Input should be a valid list/i, text: () => 'must be a list' },
  { pattern: /^Input should be a valid dictionary/i, text: () => 'must be a mapping (an object)' },
  { pattern: /^Input should be (.+)/i, text: (m) => `must be ${m[1].replace(/, got .*$/, '')}` },
  { pattern: /^Value error, (.+)/i, text: (m) => m[1] },
]

/** `msg` as a sentence a person understands (unchanged when no rule applies). */
export function humanizeError(loc: string, msg: string): string {
  const field = loc.split('.').filter((p) => !/^\d+$/.test(p)).pop() ?? ''
  for (const rule of RULES) {
    if (rule.field !== undefined && rule.field !== field) continue
    const m = msg.match(rule.pattern)
    if (m) return rule.text(m)
  }
  return msg
}
