// The README's walkthrough, with a client generated from docs/openapi.yaml: two sessions, a
// grant, a refusal read as a typed 409, a wait in the queue granted by the release, the
// fencing check of the old and the new token, and a request without a token read as a typed
// 401. It exits 1 at the first answer that differs from what the spec and docs/api.md promise.
//
//   RAFTLOCK_URL    a node's base URL, e.g. http://127.0.0.1:7001
//   RAFTLOCK_TOKEN  a token with write access to the lock prefix "ts/" (under --acl)
//   RAFTLOCK_LOCK   the lock's name (default "ts/walkthrough")
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type ErrorCode = components["schemas"]["ErrorCode"];

const baseUrl = process.env.RAFTLOCK_URL ?? "http://127.0.0.1:7001";
const token = process.env.RAFTLOCK_TOKEN ?? "";
const lock = process.env.RAFTLOCK_LOCK ?? "ts/walkthrough";

const api = createClient<paths>({ baseUrl, headers: token ? { "X-Raftlock-Token": token } : {} });
const anonymous = createClient<paths>({ baseUrl });

function fail(step: string, detail: unknown): never {
  console.error(`walkthrough: ${step}: ${JSON.stringify(detail)}`);
  process.exit(1);
}

// must returns the body of a 2xx answer, or fails the walkthrough with the error body.
function must<T>(step: string, r: { data?: T; error?: unknown; response: Response }): T {
  if (r.data === undefined) {
    fail(step, { status: r.response.status, error: r.error });
  }
  return r.data;
}

// expectError checks that an answer is the given status and error code.
function expectError(step: string, status: number, code: ErrorCode, r: { error?: { error: { code: ErrorCode } }; response: Response }) {
  if (r.response.status !== status || r.error?.error.code !== code) {
    fail(step, { status: r.response.status, error: r.error, want: { status, code } });
  }
}

async function main() {
  const path = { name: lock };
  const s1 = must("create session 1", await api.POST("/v1/sessions", { body: { ttl: "60s", name: "ts-walk-1" } }));
  const s2 = must("create session 2", await api.POST("/v1/sessions", { body: { ttl: "60s", name: "ts-walk-2" } }));

  const g1 = must("acquire", await api.POST("/v1/locks/{name}/acquire", { params: { path }, body: { session: s1.id, value: "ts-walk" } }));
  if (g1.name !== lock || g1.session !== s1.id || !(g1.token > 0)) fail("acquire", g1);

  // A 409 read as a typed error: its code, and the holder the spec puts beside it.
  const held = await api.POST("/v1/locks/{name}/acquire", { params: { path }, body: { session: s2.id } });
  expectError("acquire while held", 409, "lock_held", held);
  const conflict = held.error;
  if (!conflict || !("holder" in conflict) || conflict.holder?.token !== g1.token) fail("the 409's holder", conflict);

  // Wait in the queue; the release grants the waiter.
  const waiting = api.POST("/v1/locks/{name}/acquire", { params: { path }, body: { session: s2.id, wait: "20s" } });
  for (let tries = 0; ; tries++) {
    const l = must("read the lock", await api.GET("/v1/locks/{name}", { params: { path } }));
    if (l.waiters === 1) break;
    if (tries > 200) fail("the second session never queued", l);
    await new Promise((r) => setTimeout(r, 50));
  }
  must("release", await api.POST("/v1/locks/{name}/release", { params: { path }, body: { session: s1.id, token: g1.token } }));
  const g2 = must("the waiter's grant", await waiting);
  if (g2.session !== s2.id || !(g2.token > g1.token)) fail("the waiter's grant", { g1, g2 });

  // Fencing: the old token is no longer current, the new one is.
  const old = must("check the old token", await api.GET("/v1/locks/{name}/check", { params: { path, query: { token: g1.token } } }));
  if (old.current || old.token !== g2.token) fail("check the old token", old);
  const cur = must("check the new token", await api.GET("/v1/locks/{name}/check", { params: { path, query: { token: g2.token } } }));
  if (!cur.current) fail("check the new token", cur);

  // A stale release is refused, and never frees the lock.
  expectError("release with the old token", 409, "not_holder",
    await api.POST("/v1/locks/{name}/release", { params: { path }, body: { session: s1.id, token: g1.token } }));

  // A 401 read as a typed error: no token under --acl.
  if (token) {
    expectError("read without a token", 401, "unauthorized", await anonymous.GET("/v1/locks/{name}", { params: { path } }));
  }

  must("release the waiter's grant", await api.POST("/v1/locks/{name}/release", { params: { path }, body: { session: s2.id, token: g2.token } }));
  for (const s of [s1, s2]) {
    must("destroy a session", await api.DELETE("/v1/sessions/{id}", { params: { path: { id: s.id } } }));
  }
  console.log(`walkthrough ok: tokens ${g1.token} then ${g2.token}`);
}

main().catch((e) => fail("unexpected", String(e)));
