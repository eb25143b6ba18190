import assert from "node:assert/strict";

/** Expects ``promise`` to fail with HTTP ``status`` (unless undefined) and error ``code`` (unless undefined, read
 * from the error by ``codeOf``, which differs between the SDKs); returns the error. */
export async function refused(promise, status, code, codeOf) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `expected ${status} ${code ?? ""}, got success`);
  if (status !== undefined) assert.equal(err.statusCode, status, `${err.message}`);
  if (code !== undefined) assert.equal(codeOf(err), code, `${err.message}`);
  return err;
}

// The case runner both case files end with: run every [number, name, fn] case (or the numbers given on the
// command line), print {"results": [...]} as one JSON line for tests/js_cases.py, exit 1 unless all passed.
export async function runCases(cases) {
  const only = process.argv.slice(2).map(Number);
  const results = [];
  for (const [n, name, fn] of cases) {
    if (only.length && !only.includes(n)) continue;
    const t0 = performance.now();
    try {
      await fn();
      results.push({ case: n, name, ok: true, ms: Math.round(performance.now() - t0) });
    } catch (e) {
      results.push({ case: n, name, ok: false, ms: Math.round(performance.now() - t0),
        error: `${e?.name}: ${e?.message}`.slice(0, 2000) });
    }
  }
  console.log(JSON.stringify({ results }));
  process.exit(results.every((r) => r.ok) ? 0 : 1);
}
