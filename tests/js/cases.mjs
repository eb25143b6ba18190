// The 25 conformance cases of the REST reference (section 10), driven by the JavaScript SDK
// (@azure/data-tables) against a running rangetable HTTP frontend, and case 26: rangetable's own
// extension (conditions and counters, docs/http.md) sent as customHeaders.
//
//   RT_TABLE_URL=http://127.0.0.1:10002/devstoreaccount1 RT_ACCOUNT=devstoreaccount1 RT_KEY=<base64> node cases.mjs
//
// Prints one JSON line {"results": [{"case", "name", "ok", "ms", "error"}...]} and exits 1 when a case
// failed. tests/test_js_sdk.py runs it; it can also be run by hand against any Table endpoint.

import assert from "node:assert/strict";
import {
  AzureNamedKeyCredential,
  AzureSASCredential,
  TableClient,
  TableServiceClient,
  generateTableSas,
  odata,
} from "@azure/data-tables";
import { refused, runCases } from "./run_cases.mjs";

const url = process.env.RT_TABLE_URL;
const account = process.env.RT_ACCOUNT || "devstoreaccount1";
const key = process.env.RT_KEY;
if (!url || !key) {
  console.error("RT_TABLE_URL and RT_KEY must be set");
  process.exit(2);
}
const opts = { allowInsecureConnection: true, retryOptions: { maxRetries: 0 } };
const cred = new AzureNamedKeyCredential(account, key);
const svc = new TableServiceClient(url, cred, opts);
let counter = 0;
const newName = () => `js${Date.now().toString(36)}${(counter++).toString(36)}`;
const tableClient = (name, credential = cred) => new TableClient(url, name, credential, opts);

async function withTable(fn) {
  const name = newName();
  await svc.createTable(name);
  try {
    return await fn(tableClient(name), name);
  } finally {
    await svc.deleteTable(name);
  }
}

function errorCode(err) {
  return err?.code ?? err?.response?.headers?.get("x-ms-error-code");
}

const fails = (promise, status, code) => refused(promise, status, code, errorCode);

async function all(iter) {
  const out = [];
  for await (const x of iter) out.push(x);
  return out;
}

const keysOf = (ents) => ents.map((e) => `${e.partitionKey}/${e.rowKey}`);

const cases = [
  [1, "create, list, delete table", async () => {
    const name = newName();
    await svc.createTable(name);
    const names = (await all(svc.listTables())).map((t) => t.name);
    assert.ok(names.includes(name));
    await svc.deleteTable(name);
    assert.ok(!(await all(svc.listTables())).map((t) => t.name).includes(name));
    await fails(tableClient(name).createEntity({ partitionKey: "p", rowKey: "r" }), 404, "TableNotFound");
  }],
  [2, "table-name validation", async () => {
    for (const bad of ["1abc", "ab", "a".repeat(64), "a-b", "tables"]) {
      await fails(svc.createTable(bad), 400);
    }
    const name = `My${newName()}`;
    await svc.createTable(name);
    try {
      await svc.createTable(name.toLowerCase()); // 409 TableAlreadyExists, which the SDK swallows
      const same = (await all(svc.listTables())).filter((t) => t.name.toLowerCase() === name.toLowerCase());
      assert.deepEqual(same.map((t) => t.name), [name]);
    } finally {
      await svc.deleteTable(name);
    }
  }],
  [3, "insert answers (Prefer: return-no-content, the SDK's default)", () => withTable(async (t) => {
    const res = await t.createEntity({ partitionKey: "p", rowKey: "r", A: 1 });
    assert.match(res.etag, /^W\/"datetime'/);
    assert.equal((await t.getEntity("p", "r")).etag, res.etag);
  })],
  [4, "duplicate insert, insert into a missing table", () => withTable(async (t) => {
    await t.createEntity({ partitionKey: "p", rowKey: "r" });
    await fails(t.createEntity({ partitionKey: "p", rowKey: "r" }), 409, "EntityAlreadyExists");
    await fails(tableClient(newName()).createEntity({ partitionKey: "p", rowKey: "r" }), 404, "TableNotFound");
  })],
  [5, "type round trip", () => withTable(async (t) => {
    const when = new Date("2024-01-02T03:04:05.123Z");
    const guid = "c9da6455-213d-42c9-9a79-3e9149a57833";
    await t.createEntity({
      partitionKey: "p", rowKey: "r", S: "text", I: 42, B: true, D: 2.5, W: when,
      L: { value: "1099511627776", type: "Int64" }, G: { value: guid, type: "Guid" },
      N: { value: "NaN", type: "Double" }, Inf: { value: "Infinity", type: "Double" },
      Whole: { value: "5", type: "Double" }, Bin: new Uint8Array([1, 2, 255]),
    });
    const e = await t.getEntity("p", "r");
    assert.equal(e.S, "text");
    assert.equal(e.I, 42);
    assert.equal(e.B, true);
    assert.equal(e.D, 2.5);
    assert.equal(e.W.toISOString(), when.toISOString());
    assert.equal(e.L, 1099511627776n);
    assert.deepEqual(e.G, { value: guid, type: "Guid" });
    assert.equal(e.N, "NaN"); // the SDK hands Double specials back as the strings it reads
    assert.equal(e.Inf, "Infinity");
    assert.deepEqual([...e.Bin], [1, 2, 255]);
    const raw = await t.getEntity("p", "r", { disableTypeConversion: true });
    // a whole Double goes out as 5.0 without annotation (as on Azure); JSON.parse makes it 5, and the SDK
    // infers Int32 for it: a JavaScript limit, not a server one
    assert.equal(Number(raw.Whole.value), 5);
    assert.equal(raw.W.type, "DateTime");
    assert.match(raw.W.value, /^2024-01-02T03:04:05\.123\d*Z$/);
  })],
  [6, "metadata: ETag and Timestamp on every entity", () => withTable(async (t) => {
    await t.createEntity({ partitionKey: "p", rowKey: "r" });
    const [e] = await all(t.listEntities());
    assert.match(e.etag, /^W\/"datetime'/);
    assert.ok(e.timestamp && !Number.isNaN(Date.parse(e.timestamp)));
  })],
  [7, "lenient typed input", () => withTable(async (t) => {
    await t.createEntity({
      partitionKey: "p", rowKey: "r", I: { value: "12345", type: "Int32" },
      B: { value: "False", type: "Boolean" }, D: { value: "3.14", type: "Double" },
    });
    const e = await t.getEntity("p", "r");
    assert.equal(e.I, 12345);
    assert.equal(e.B, false);
    assert.equal(e.D, 3.14);
    await fails(t.createEntity({ partitionKey: "p", rowKey: "x", L: { value: "9223372036854775808", type: "Int64" } }),
      400, "InvalidInput");
  })],
  [8, "key handling", () => withTable(async (t) => {
    for (const [pk, rk] of [["p'1", "r 1"], ["@*$!%", "你好"], ["p", ""]]) {
      await t.createEntity({ partitionKey: pk, rowKey: rk, A: 1 });
      assert.equal((await t.getEntity(pk, rk)).A, 1);
      await t.updateEntity({ partitionKey: pk, rowKey: rk, A: 2 }, "Replace");
      assert.equal((await t.getEntity(pk, rk)).A, 2);
      await t.deleteEntity(pk, rk);
      await fails(t.getEntity(pk, rk), 404);
    }
    for (const bad of ["a/b", "a\\b", "a#b", "a?b", "a\u0001b"]) {
      await fails(t.createEntity({ partitionKey: bad, rowKey: "r" }), 400);
    }
  })],
  [9, "property limits", () => withTable(async (t) => {
    const many = { partitionKey: "p", rowKey: "r" };
    for (let i = 0; i < 253; i++) many[`P${i}`] = i;
    await fails(t.createEntity(many), 400, "TooManyProperties");
    await fails(t.createEntity({ partitionKey: "p", rowKey: "r", ["N".repeat(256)]: 1 }), 400, "PropertyNameTooLong");
    await fails(t.createEntity({ partitionKey: "p", rowKey: "r", "a-b": 1 }), 400, "PropertyNameInvalid");
    await fails(t.createEntity({ partitionKey: "p", rowKey: "r", S: "x".repeat(32769) }), 400, "PropertyValueTooLarge");
    await t.createEntity({ partitionKey: "p", rowKey: "r", ETag: "a", etag_: "b" });
  })],
  [10, "replace vs merge", () => withTable(async (t) => {
    await t.createEntity({ partitionKey: "p", rowKey: "r", A: 1, B: 2 });
    await t.updateEntity({ partitionKey: "p", rowKey: "r", A: 3 }, "Merge");
    let e = await t.getEntity("p", "r");
    assert.deepEqual([e.A, e.B], [3, 2]);
    await t.updateEntity({ partitionKey: "p", rowKey: "r", A: 4 }, "Replace");
    e = await t.getEntity("p", "r");
    assert.deepEqual([e.A, e.B], [4, undefined]);
  })],
  [11, "upserts", () => withTable(async (t) => {
    await t.upsertEntity({ partitionKey: "p", rowKey: "r", A: 1, B: 1 }, "Merge");
    await t.upsertEntity({ partitionKey: "p", rowKey: "r", A: 2 }, "Merge");
    let e = await t.getEntity("p", "r");
    assert.deepEqual([e.A, e.B], [2, 1]);
    await t.upsertEntity({ partitionKey: "p", rowKey: "r", A: 3 }, "Replace");
    e = await t.getEntity("p", "r");
    assert.deepEqual([e.A, e.B], [3, undefined]);
  })],
  [12, "optimistic concurrency", () => withTable(async (t) => {
    const first = await t.createEntity({ partitionKey: "p", rowKey: "r", A: 1 });
    const second = await t.updateEntity({ partitionKey: "p", rowKey: "r", A: 2 }, "Merge", { etag: first.etag });
    assert.notEqual(second.etag, first.etag);
    await fails(t.updateEntity({ partitionKey: "p", rowKey: "r", A: 3 }, "Replace", { etag: first.etag }),
      412, "UpdateConditionNotSatisfied");
    await fails(t.deleteEntity("p", "r", { etag: first.etag }), 412, "UpdateConditionNotSatisfied");
    await fails(t.updateEntity({ partitionKey: "p", rowKey: "missing", A: 1 }, "Replace"), 404, "ResourceNotFound");
    await t.deleteEntity("p", "r", { etag: second.etag });
  })],
  [13, "get entity", () => withTable(async (t) => {
    await t.createEntity({ partitionKey: "p", rowKey: "r", A: 1 });
    const e = await t.getEntity("p", "r");
    assert.deepEqual([e.partitionKey, e.rowKey, e.A], ["p", "r", 1]);
    await fails(t.getEntity("p", "nope"), 404, "ResourceNotFound");
  })],
  [14, "$select", () => withTable(async (t) => {
    await t.createEntity({ partitionKey: "p", rowKey: "r", A: 1, B: 2 });
    const [e] = await all(t.listEntities({ queryOptions: { select: ["A", "Missing"] } }));
    assert.equal(e.A, 1);
    assert.equal(e.B, undefined);
    assert.equal(e.Missing, null);
    const g = await t.getEntity("p", "r", { queryOptions: { select: ["B"] } });
    assert.deepEqual([g.A, g.B], [undefined, 2]);
  })],
  [15, "filter literals", () => withTable(async (t) => {
    const when = new Date("2020-05-01T12:00:00Z");
    const guid = "a455c695-df98-5678-aaaa-81d3367e5a34";
    await t.createEntity({
      partitionKey: "p", rowKey: "1", S: "it's", I: 5, L: { value: "1099511627776", type: "Int64" },
      D: 2.5, B: true, W: when, G: { value: guid, type: "Guid" }, X: new Uint8Array([1, 2]),
    });
    await t.createEntity({ partitionKey: "p", rowKey: "2", S: "other", I: 7, B: false });
    const match = async (filter) => keysOf(await all(t.listEntities({ queryOptions: { filter } })));
    for (const filter of [
      odata`S eq ${"it's"}`, odata`I lt ${6}`, "L eq 1099511627776L", "D gt 2.0", "B eq true",
      odata`W eq ${when}`, `G eq guid'${guid}'`, "X eq X'0102'", "I eq 5 and (S eq 'x' or not (B eq false))",
      "RowKey ge '1' and RowKey lt '2'", "true and RowKey eq '1'",
    ]) {
      assert.deepEqual(await match(filter), ["p/1"], filter);
    }
  })],
  [16, "filter semantics", () => withTable(async (t) => {
    await t.createEntity({ partitionKey: "p", rowKey: "1", L: { value: "12", type: "Int64" } });
    await t.createEntity({ partitionKey: "p", rowKey: "2", S: "12" });
    const match = async (filter) => keysOf(await all(t.listEntities({ queryOptions: { filter } })));
    assert.deepEqual(await match("L eq 12"), ["p/1"]);
    assert.deepEqual(await match("L ne 13"), ["p/1"]);
    assert.deepEqual(await match("S eq 12"), []);
    const names = (await all(svc.listTables({ queryOptions: { filter: odata`TableName eq ${t.tableName}` } })))
      .map((x) => x.name);
    assert.deepEqual(names, [t.tableName]);
  })],
  [17, "filter errors", () => withTable(async (t) => {
    await fails(all(t.listEntities({ queryOptions: { filter: "startswith(S, 'a')" } })), 501, "NotImplemented");
    await fails(all(t.listEntities({ queryOptions: { filter: "S eq" } })), 400, "InvalidInput");
    await fails(all(t.listEntities({ queryOptions: { filter: "I eq 2147483648" } })), 400, "InvalidInput");
  })],
  [18, "paging", () => withTable(async (t) => {
    for (let b = 0; b < 11; b++) {
      const actions = [];
      for (let i = 0; i < 100; i++) {
        actions.push(["create", { partitionKey: `p${b % 3}`, rowKey: `r${String(b * 100 + i).padStart(4, "0")}` }]);
      }
      const byPk = new Map();
      for (const a of actions) byPk.set(a[1].partitionKey, [...(byPk.get(a[1].partitionKey) || []), a]);
      for (const group of byPk.values()) await t.submitTransaction(group);
    }
    const sizes = [];
    const seen = [];
    for await (const page of t.listEntities().byPage({ maxPageSize: 400 })) {
      sizes.push(page.length);
      seen.push(...keysOf(page));
    }
    assert.deepEqual(sizes, [400, 400, 300]);
    assert.equal(new Set(seen).size, 1100);
    assert.deepEqual(seen, [...seen].sort());
    const defaultPages = [];
    for await (const page of t.listEntities().byPage()) defaultPages.push(page.length);
    assert.deepEqual(defaultPages, [1000, 100]);
  })],
  [19, "batch happy path", () => withTable(async (t) => {
    await t.createEntity({ partitionKey: "b", rowKey: "3", A: 1 });
    await t.createEntity({ partitionKey: "b", rowKey: "4", A: 1 });
    const res = await t.submitTransaction([
      ["create", { partitionKey: "b", rowKey: "1", A: 1 }],
      ["upsert", { partitionKey: "b", rowKey: "2", A: 2 }, "Merge"],
      ["update", { partitionKey: "b", rowKey: "3", A: 3 }, "Replace"],
      ["delete", { partitionKey: "b", rowKey: "4" }],
    ]);
    assert.equal(res.status, 202);
    assert.equal(res.subResponses.length, 4);
    assert.ok(res.subResponses.slice(0, 3).every((r) => r.status === 204 || r.status === 201));
    assert.deepEqual(keysOf(await all(t.listEntities())), ["b/1", "b/2", "b/3"]);
  })],
  [20, "batch atomicity", () => withTable(async (t) => {
    await t.createEntity({ partitionKey: "b", rowKey: "dup" });
    const err = await fails(t.submitTransaction([
      ["create", { partitionKey: "b", rowKey: "new" }],
      ["create", { partitionKey: "b", rowKey: "dup" }],
    ]), 409, "EntityAlreadyExists");
    assert.match(err.message, /^1:/);
    await fails(t.getEntity("b", "new"), 404);
  })],
  [21, "batch limits", () => withTable(async (t) => {
    const tooMany = [];
    for (let i = 0; i < 101; i++) tooMany.push(["create", { partitionKey: "b", rowKey: `r${i}` }]);
    await fails(t.submitTransaction(tooMany), 400);
    await fails(t.submitTransaction([
      ["create", { partitionKey: "b", rowKey: "same" }], ["upsert", { partitionKey: "b", rowKey: "same" }],
    ]), 400, "InvalidDuplicateRow");
    const big = "y".repeat(30000); // 100 entities x 2 x 30,000 characters: over the 4 MiB of a batch
    await fails(t.submitTransaction(Array.from({ length: 100 },
      (_, i) => ["create", { partitionKey: "b", rowKey: `s${i}`, S: big, T: big }])), 413);
    assert.deepEqual(await all(t.listEntities()), []);
  })],
  [22, "shared key", () => withTable(async (t, name) => {
    const wrong = new AzureNamedKeyCredential(account, Buffer.from("not the key").toString("base64"));
    await fails(tableClient(name, wrong).createEntity({ partitionKey: "p", rowKey: "r" }), 403, "AuthenticationFailed");
    await t.createEntity({ partitionKey: "p", rowKey: "r" });
  })],
  [23, "table SAS", () => withTable(async (t, name) => {
    await t.createEntity({ partitionKey: "p", rowKey: "r" });
    const expiresOn = new Date(Date.now() + 3600e3);
    const readOnly = generateTableSas(name, cred, { permissions: { query: true }, expiresOn });
    const reader = tableClient(name, new AzureSASCredential(readOnly));
    assert.deepEqual(keysOf(await all(reader.listEntities())), ["p/r"]);
    await fails(reader.createEntity({ partitionKey: "p", rowKey: "x" }), 403, "AuthorizationPermissionMismatch");
    const expired = generateTableSas(name, cred, { permissions: { query: true }, expiresOn: new Date(Date.now() - 60e3) });
    await fails(all(tableClient(name, new AzureSASCredential(expired)).listEntities()), 403);
    await t.setAccessPolicy([{ id: "pol", accessPolicy: { permission: "r", start: new Date(Date.now() - 60e3), expiry: expiresOn } }]);
    const viaPolicy = generateTableSas(name, cred, { identifier: "pol" });
    assert.deepEqual(keysOf(await all(tableClient(name, new AzureSASCredential(viaPolicy)).listEntities())), ["p/r"]);
  })],
  [24, "ACL and service XML", () => withTable(async (t) => {
    const start = new Date("2020-01-01T00:00:00Z");
    await t.setAccessPolicy([
      { id: "full", accessPolicy: { permission: "raud", start, expiry: new Date("2030-01-01T00:00:00Z") } },
      { id: "bare" },
    ]);
    const acl = [...(await t.getAccessPolicy())];
    assert.deepEqual(acl.map((s) => s.id).sort(), ["bare", "full"]);
    const full = acl.find((s) => s.id === "full");
    assert.equal(full.accessPolicy.permission, "raud");
    assert.equal(new Date(full.accessPolicy.start).getTime(), start.getTime());
    await fails(t.setAccessPolicy([{ id: "w", accessPolicy: { permission: "w" } }]), 400, "InvalidXmlDocument");
    const props = await svc.getProperties();
    await svc.setProperties({ ...props, cors: [{ allowedOrigins: "http://js.example", allowedMethods: "GET",
      allowedHeaders: "", exposedHeaders: "", maxAgeInSeconds: 5 }] });
    const back = await svc.getProperties();
    assert.equal(back.cors[0].allowedOrigins, "http://js.example");
    await svc.setProperties({ ...back, cors: [] });
    // Get Service Stats lives on the secondary. The SDK derives it by suffixing the first label of the
    // host name, which breaks an IP address (127-secondary.0.0.1): use a client on the path-style
    // secondary URL without that policy instead.
    const secondaryUrl = url.replace(/\/([^/]+)\/?$/, "/$1-secondary");
    const secondary = new TableServiceClient(secondaryUrl, cred, opts);
    secondary.pipeline.removePolicy({ name: "tablesSecondaryEndpointPolicy" });
    const stats = await secondary.getStatistics();
    assert.equal(stats.geoReplication.status, "live");
    // the secondary serves reads and refuses writes
    await t.createEntity({ partitionKey: "p", rowKey: "r" });
    const reader = new TableClient(secondaryUrl, t.tableName, cred, opts);
    assert.deepEqual(keysOf(await all(reader.listEntities())), ["p/r"]);
    assert.equal((await reader.getEntity("p", "r")).rowKey, "r");
    await fails(reader.createEntity({ partitionKey: "p", rowKey: "s" }), 403, "InsufficientAccountPermissions");
    await fails(reader.deleteEntity("p", "r"), 403, "InsufficientAccountPermissions");
    await fails(svc.getStatistics({ requestOptions: { customHeaders: { "tables-secondary-endpoint": "" } } }), 400,
      "InvalidQueryParameterValue");
  })],
  [25, "protocol hygiene", () => withTable(async (t) => {
    let seen;
    const res = await t.createEntity({ partitionKey: "p", rowKey: "r" }, {
      requestOptions: { customHeaders: { "x-ms-client-request-id": "js-crid" } },
      onResponse: (r) => { seen = r; },
    });
    assert.ok(res.etag);
    for (const h of ["x-ms-request-id", "x-ms-version", "date"]) assert.ok(seen.headers.get(h), h);
    assert.equal(seen.headers.get("x-ms-client-request-id"), "js-crid");
    const err = await fails(t.getEntity("p", "missing"), 404, "ResourceNotFound");
    assert.match(err.response.headers.get("content-type"), /^application\/json/);
    assert.equal(err.response.headers.get("x-ms-error-code"), "ResourceNotFound");
  })],
  [26, "rangetable extension: conditions and counters through customHeaders", () => withTable(async (t) => {
    await t.createEntity({ partitionKey: "p", rowKey: "r", stock: 1 });
    const decrement = { "x-rangetable-condition": "stock ge 1", "x-rangetable-counters": '{"stock": -1}' };
    let seen;
    await t.updateEntity({ partitionKey: "p", rowKey: "r" }, "Merge",
      { requestOptions: { customHeaders: decrement }, onResponse: (r) => { seen = r; } });
    assert.deepEqual(JSON.parse(seen.headers.get("x-rangetable-counters")), { stock: 0 });
    const err = await fails(t.updateEntity({ partitionKey: "p", rowKey: "r" }, "Merge",
      { requestOptions: { customHeaders: decrement } }), 412, "ConditionCheckFailed");
    assert.match(err.message, /stock ge 1/);
    await fails(t.upsertEntity({ partitionKey: "p", rowKey: "r" }, "Replace",
      { requestOptions: { customHeaders: { "x-rangetable-expect": "absent" } } }), 412, "ConditionCheckFailed");
    assert.equal((await t.getEntity("p", "r")).stock, 0);
  })],
];

await runCases(cases);
