// The 25 conformance cases of the REST reference (section 10), driven by the legacy JavaScript SDK
// (azure-storage 2.10, the callback API) against a running rangetable HTTP frontend, in one of two modes:
//
//   RT_MODE=table_endpoint  a connection string with AccountName, AccountKey and TableEndpoint=<account URL>
//   RT_MODE=emulator        "UseDevelopmentStorage=true": the dev account, its well-known key and path-style
//                           URLs; the SDK fixes the port at 10002, so only the host is pointed at ours
//
//   RT_TABLE_URL=http://127.0.0.1:10002/devstoreaccount1 RT_KEY=<base64> RT_MODE=emulator node legacy_cases.mjs
//
// Prints one JSON line {"results": [{"case", "name", "ok", "ms", "error"}...]} and exits 1 when a case
// failed. Where the SDK itself refuses bad input (table names, batch size), the case checks that refusal.
// tests/integration/test_legacy_js_sdk.py runs it.

import assert from "node:assert/strict";
import azure from "azure-storage";
import { refused, runCases } from "./run_cases.mjs";

const url = process.env.RT_TABLE_URL;
const account = process.env.RT_ACCOUNT || "devstoreaccount1";
const key = process.env.RT_KEY;
const mode = process.env.RT_MODE || "table_endpoint";
if (!url || !key || !["table_endpoint", "emulator"].includes(mode)) {
  console.error("RT_TABLE_URL and RT_KEY must be set, RT_MODE table_endpoint or emulator");
  process.exit(2);
}
const hosts = { primaryHost: url, secondaryHost: `${url}-secondary` };
const { TableQuery, TableBatch, TableUtilities } = azure;
const { entityGenerator: gen, QueryComparisons: Q, TableOperators: OP } = TableUtilities;
const Perm = TableUtilities.SharedAccessPermissions;

/** A TableService in this run's mode, signing with ``withKey`` (the account key unless a case swaps it). */
function service(withKey = key) {
  if (mode === "emulator") {
    const svc = azure.createTableService("UseDevelopmentStorage=true");
    assert.ok(svc.usePathStyleUri);
    assert.equal(svc.storageAccount, account);
    svc.setHost(hosts); // the emulator's port is fixed at 10002: everything else is the SDK's own emulator mode
    if (withKey !== key) svc.storageCredentials.signer = new (svc.storageCredentials.signer.constructor)(withKey);
    return svc;
  }
  return azure.createTableService(
    `DefaultEndpointsProtocol=http;AccountName=${account};AccountKey=${withKey};TableEndpoint=${url};`);
}

/** A TableService holding only a SAS token, on the same endpoints. */
function sasService(token) {
  if (mode === "emulator") return azure.createTableServiceWithSas(hosts, token);
  return azure.createTableService(`SharedAccessSignature=${token};TableEndpoint=${url};`);
}

const svc = service();
let counter = 0;
const newName = () => `ljs${Date.now().toString(36)}${(counter++).toString(36)}`;

/** Calls ``target[method](...args, callback)`` and resolves to the callback's values after the error. */
function call(target, method, ...args) {
  return new Promise((resolve, reject) => {
    target[method](...args, (err, ...rest) => (err ? reject(err) : resolve(rest)));
  });
}
const first = async (...a) => (await call(...a))[0];

async function withTable(fn) {
  const name = newName();
  await call(svc, "createTable", name);
  try {
    return await fn(name);
  } finally {
    await call(svc, "deleteTable", name);
  }
}

/** Expects a refusal from the server with ``status`` (and ``code``), and returns the error. */
const fails = (promise, status, code) => refused(promise, status, code, (e) => e?.code);

/** Expects the SDK to refuse before sending anything: an error with no HTTP status, matching ``pattern``. */
async function refusedBySdk(fn, pattern) {
  let err;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  assert.ok(err, `expected the SDK to refuse (${pattern}), got success`);
  assert.equal(err.statusCode, undefined, `the server answered: ${err.message}`);
  assert.match(err.message, pattern);
}

const ent = (pk, rk, props = {}) => ({ PartitionKey: gen.String(pk), RowKey: gen.String(rk), ...props });
const get = (table, pk, rk, options = {}) => first(svc, "retrieveEntity", table, pk, rk, options);
const etagOf = (result) => result[".metadata"].etag;

/** Every entity of ``query`` (all pages). */
async function queryAll(table, query = null) {
  const out = [];
  let token = null;
  do {
    const page = await first(svc, "queryEntities", table, query, token);
    out.push(...page.entries);
    token = page.continuationToken;
  } while (token);
  return out;
}
const rowKeys = async (table, filter) => (await queryAll(table, new TableQuery().where(filter)))
  .map((e) => e.RowKey._).sort();

async function tableNames(prefix) {
  const out = [];
  let token = null;
  do {
    const page = prefix === undefined ? await first(svc, "listTablesSegmented", token)
      : await first(svc, "listTablesSegmentedWithPrefix", prefix, token);
    out.push(...page.entries);
    token = page.continuationToken;
  } while (token);
  return out;
}

const cases = [
  [1, "create, list, delete table", async () => {
    const name = newName();
    assert.equal((await first(svc, "createTable", name)).TableName, name);
    assert.ok((await tableNames()).includes(name));
    assert.equal((await first(svc, "doesTableExist", name)).exists, true);
    await call(svc, "deleteTable", name);
    assert.ok(!(await tableNames()).includes(name));
    assert.equal(await first(svc, "deleteTableIfExists", name), false);
    await fails(call(svc, "insertEntity", name, ent("p", "r")), 404, "TableNotFound");
  }],
  [2, "table-name validation", async () => {
    for (const bad of ["1abc", "ab", "a".repeat(64), "a-b", "tables"]) {
      await refusedBySdk(() => call(svc, "createTable", bad), /Table name/);
    }
    const name = `My${newName()}`;
    await call(svc, "createTable", name);
    try {
      await fails(call(svc, "createTable", name.toLowerCase()), 409, "TableAlreadyExists");
      assert.equal((await first(svc, "createTableIfNotExists", name.toLowerCase())).created, false);
      const same = (await tableNames()).filter((t) => t.toLowerCase() === name.toLowerCase());
      assert.deepEqual(same, [name]);
    } finally {
      await call(svc, "deleteTable", name);
    }
  }],
  [3, "insert answers (return-no-content by default, the entity with echoContent)", () => withTable(async (t) => {
    const [res, response] = await call(svc, "insertEntity", t, ent("p", "r", { A: gen.Int32(1) }));
    assert.equal(response.statusCode, 204);
    assert.match(etagOf(res), /^W\/"datetime'/);
    assert.equal(etagOf(await get(t, "p", "r")), etagOf(res));
    const [echoed, r2] = await call(svc, "insertEntity", t, ent("p", "e", { A: gen.Int32(2) }), { echoContent: true });
    assert.equal(r2.statusCode, 201);
    assert.equal(echoed.A._, 2);
    assert.match(etagOf(echoed), /^W\/"datetime'/);
  })],
  [4, "duplicate insert, insert into a missing table", () => withTable(async (t) => {
    await call(svc, "insertEntity", t, ent("p", "r"));
    await fails(call(svc, "insertEntity", t, ent("p", "r")), 409, "EntityAlreadyExists");
    await fails(call(svc, "insertEntity", newName(), ent("p", "r")), 404, "TableNotFound");
  })],
  [5, "type round trip", () => withTable(async (t) => {
    const when = new Date("2024-01-02T03:04:05.123Z");
    const guid = "c9da6455-213d-42c9-9a79-3e9149a57833";
    await call(svc, "insertEntity", t, ent("p", "r", {
      S: gen.String("text"), I: gen.Int32(42), B: gen.Boolean(true), D: gen.Double(2.5), W: gen.DateTime(when),
      L: gen.Int64("1099511627776"), G: gen.Guid(guid), Whole: gen.Double(5), Bin: gen.Binary(Buffer.from([1, 2, 255])),
      Plain: 7, PlainF: 1.25,
    }));
    const e = await get(t, "p", "r");
    assert.deepEqual([e.S._, e.S.$], ["text", undefined]); // minimal metadata: String and Int32 unannotated
    assert.equal(e.I._, 42);
    assert.equal(e.B._, true);
    assert.equal(e.D._, 2.5);
    assert.deepEqual([e.W.$, e.W._.toISOString()], ["Edm.DateTime", when.toISOString()]);
    assert.deepEqual(e.L, { _: "1099511627776", $: "Edm.Int64" });
    assert.deepEqual(e.G, { _: guid, $: "Edm.Guid" });
    assert.deepEqual([e.Bin.$, [...e.Bin._]], ["Edm.Binary", [1, 2, 255]]);
    // a whole Double goes out as 5.0, unannotated (as on Azure): the SDK's JSON parser reads 5.0 as a Double
    assert.deepEqual([e.Whole.$, e.Whole._], ["Edm.Double", 5]);
    assert.deepEqual([e.Plain._, e.PlainF._], [7, 1.25]); // guessed types on the way in: Int32 and Double
    const full = await get(t, "p", "r", { payloadFormat: TableUtilities.PayloadFormat.FULL_METADATA });
    assert.equal(full[".metadata"].type, `${account}.${t}`);
    assert.equal(full[".metadata"].editLink, `${t}(PartitionKey='p',RowKey='r')`);
    assert.deepEqual([full.L.$, full.G.$, full.Whole.$], ["Edm.Int64", "Edm.Guid", "Edm.Double"]);
    const bare = await get(t, "p", "r", { payloadFormat: TableUtilities.PayloadFormat.NO_METADATA });
    assert.deepEqual([bare.L, bare.G.$, bare[".metadata"].etag], [{ _: "1099511627776" }, undefined, etagOf(e)]);
  })],
  [6, "metadata: ETag and Timestamp on every entity", () => withTable(async (t) => {
    const inserted = await first(svc, "insertEntity", t, ent("p", "r"));
    const e = await get(t, "p", "r");
    assert.equal(etagOf(e), etagOf(inserted));
    assert.equal(e.Timestamp.$, "Edm.DateTime");
    assert.ok(e.Timestamp._ instanceof Date && !Number.isNaN(e.Timestamp._.getTime()));
    for (const x of await queryAll(t)) {
      assert.match(etagOf(x), /^W\/"datetime'/);
      assert.ok(x.Timestamp._ instanceof Date);
    }
  })],
  [7, "lenient typed input", () => withTable(async (t) => {
    await call(svc, "insertEntity", t, ent("p", "r", {
      I: gen.Int32("12345"), B: gen.Boolean("False"), D: gen.Double("3.14"), None: { _: null },
    }));
    const e = await get(t, "p", "r");
    assert.equal(e.I._, 12345);
    assert.equal(e.D._, 3.14);
    assert.equal(e.B._, "False"); // this SDK sends a Boolean property unannotated: a String, on Azure too
    assert.equal(e.None, undefined); // a null property is left out of the body
    await fails(call(svc, "insertEntity", t, ent("p", "x", { L: gen.Int64("9223372036854775808") })), 400, "InvalidInput");
  })],
  [8, "key handling", () => withTable(async (t) => {
    for (const [pk, rk] of [["p'1", "r 1"], ["@*$!%", "你好"], ["p", ""]]) {
      await call(svc, "insertEntity", t, ent(pk, rk, { A: gen.Int32(1) }));
      assert.equal((await get(t, pk, rk)).A._, 1);
      await call(svc, "replaceEntity", t, ent(pk, rk, { A: gen.Int32(2) }));
      assert.equal((await get(t, pk, rk)).A._, 2);
      await call(svc, "mergeEntity", t, ent(pk, rk, { B: gen.Int32(3) }));
      assert.deepEqual([(await get(t, pk, rk)).A._, (await get(t, pk, rk)).B._], [2, 3]);
      await call(svc, "deleteEntity", t, ent(pk, rk));
      await fails(get(t, pk, rk), 404, "ResourceNotFound");
    }
    for (const bad of ["a/b", "a\\b", "a#b", "a?b", "a\u0001b"]) {
      await fails(call(svc, "insertEntity", t, ent(bad, "r")), 400);
    }
  })],
  [9, "property limits", () => withTable(async (t) => {
    const many = ent("p", "r");
    for (let i = 0; i < 253; i++) many[`P${i}`] = gen.Int32(i);
    await fails(call(svc, "insertEntity", t, many), 400, "TooManyProperties");
    await fails(call(svc, "insertEntity", t, ent("p", "r", { ["N".repeat(256)]: 1 })), 400, "PropertyNameTooLong");
    await fails(call(svc, "insertEntity", t, ent("p", "r", { "a-b": 1 })), 400, "PropertyNameInvalid");
    await fails(call(svc, "insertEntity", t, ent("p", "r", { S: "x".repeat(32769) })), 400, "PropertyValueTooLarge");
    await call(svc, "insertEntity", t, ent("p", "r", { ETag: gen.String("a"), etag_: gen.String("b") }));
    assert.equal((await get(t, "p", "r")).ETag._, "a");
  })],
  [10, "replace vs merge", () => withTable(async (t) => {
    await call(svc, "insertEntity", t, ent("p", "r", { A: 1, B: 2 }));
    await call(svc, "mergeEntity", t, ent("p", "r", { A: 3 }));
    let e = await get(t, "p", "r");
    assert.deepEqual([e.A._, e.B._], [3, 2]);
    await call(svc, "replaceEntity", t, ent("p", "r", { A: 4 }));
    e = await get(t, "p", "r");
    assert.deepEqual([e.A._, e.B], [4, undefined]);
  })],
  [11, "upserts", () => withTable(async (t) => {
    await call(svc, "insertOrMergeEntity", t, ent("p", "r", { A: 1, B: 1 }));
    await call(svc, "insertOrMergeEntity", t, ent("p", "r", { A: 2 }));
    let e = await get(t, "p", "r");
    assert.deepEqual([e.A._, e.B._], [2, 1]);
    await call(svc, "insertOrReplaceEntity", t, ent("p", "r", { A: 3 }));
    e = await get(t, "p", "r");
    assert.deepEqual([e.A._, e.B], [3, undefined]);
    await call(svc, "insertOrReplaceEntity", t, ent("p", "new", { A: 4 }));
    assert.equal((await get(t, "p", "new")).A._, 4);
  })],
  [12, "optimistic concurrency", () => withTable(async (t) => {
    const old = etagOf(await first(svc, "insertEntity", t, ent("p", "r", { A: 1 })));
    const withEtag = (etag, props) => ({ ...ent("p", "r", props), ".metadata": { etag } });
    const next = etagOf(await first(svc, "mergeEntity", t, withEtag(old, { A: 2 })));
    assert.notEqual(next, old);
    await fails(call(svc, "replaceEntity", t, withEtag(old, { A: 3 })), 412, "UpdateConditionNotSatisfied");
    await fails(call(svc, "deleteEntity", t, withEtag(old)), 412, "UpdateConditionNotSatisfied");
    await fails(call(svc, "deleteEntity", t, withEtag('W/"wrong"')), 412, "UpdateConditionNotSatisfied");
    await fails(call(svc, "replaceEntity", t, ent("p", "missing", { A: 1 })), 404, "ResourceNotFound");
    // without metadata the SDK derives the ETag from the Timestamp (colons unescaped): the same version
    const nometadata = { payloadFormat: TableUtilities.PayloadFormat.NO_METADATA };
    const [bare] = (await first(svc, "queryEntities", t, null, null, nometadata)).entries;
    assert.equal(etagOf(bare), `W/"datetime'${decodeURIComponent(next.slice(12, -2))}'"`);
    const last = etagOf(await first(svc, "mergeEntity", t, { ...bare, A: gen.Int32(5) }));
    await fails(call(svc, "replaceEntity", t, { ...bare, A: gen.Int32(6) }), 412, "UpdateConditionNotSatisfied");
    await call(svc, "deleteEntity", t, withEtag(last));
    await fails(get(t, "p", "r"), 404);
  })],
  [13, "get entity", () => withTable(async (t) => {
    await call(svc, "insertEntity", t, ent("p", "r", { A: 1 }));
    const e = await get(t, "p", "r");
    assert.deepEqual([e.PartitionKey._, e.RowKey._, e.A._], ["p", "r", 1]);
    await fails(get(t, "p", "nope"), 404, "ResourceNotFound");
    const plain = await get(t, "p", "r", { entityResolver: (x) => ({ pk: x.PartitionKey._, a: x.A._ }) });
    assert.deepEqual(plain, { pk: "p", a: 1, ".metadata": plain[".metadata"] });
  })],
  [14, "$select", () => withTable(async (t) => {
    await call(svc, "insertEntity", t, ent("p", "r", { A: 1, B: 2 }));
    const [e] = await queryAll(t, new TableQuery().select("A", "Missing"));
    assert.equal(e.A._, 1);
    assert.equal(e.B, undefined);
    assert.equal(e.Missing._, null);
    const [g] = await queryAll(t, new TableQuery().select("B").where("PartitionKey eq ? and RowKey eq ?", "p", "r"));
    assert.deepEqual([g.A, g.B._], [undefined, 2]);
  })],
  [15, "filter literals", () => withTable(async (t) => {
    const when = new Date("2020-05-01T12:00:00Z");
    const guid = "a455c695-df98-5678-aaaa-81d3367e5a34";
    await call(svc, "insertEntity", t, ent("p", "1", {
      S: "it's", I: 5, L: gen.Int64("1099511627776"), D: 2.5, B: true, W: when, G: gen.Guid(guid),
      X: gen.Binary(Buffer.from([1, 2])),
    }));
    await call(svc, "insertEntity", t, ent("p", "2", { S: "other", I: 7, B: false }));
    for (const filter of [
      TableQuery.stringFilter("S", Q.EQUAL, "it's"), TableQuery.int32Filter("I", Q.LESS_THAN, 6),
      TableQuery.int64Filter("L", Q.EQUAL, "1099511627776"), TableQuery.doubleFilter("D", Q.GREATER_THAN, 2.0),
      TableQuery.booleanFilter("B", Q.EQUAL, true), TableQuery.dateFilter("W", Q.EQUAL, when),
      TableQuery.guidFilter("G", Q.EQUAL, guid), TableQuery.binaryFilter("X", Q.EQUAL, Buffer.from([1, 2])),
      TableQuery.combineFilters(TableQuery.int32Filter("I", Q.EQUAL, 5), OP.AND, "(S eq 'x' or not (B eq false))"),
      "RowKey ge '1' and RowKey lt '2'", "true and RowKey eq '1'",
    ]) {
      assert.deepEqual(await rowKeys(t, filter), ["1"], filter);
    }
    const q = new TableQuery().where("S eq ?", "it's").and("I eq ?", 5).or("RowKey eq ?", "nope");
    assert.deepEqual((await queryAll(t, q)).map((e) => e.RowKey._), ["1"]);
  })],
  [16, "filter semantics", () => withTable(async (t) => {
    await call(svc, "insertEntity", t, ent("p", "1", { L: gen.Int64("12") }));
    await call(svc, "insertEntity", t, ent("p", "2", { S: "12" }));
    assert.deepEqual(await rowKeys(t, "L eq 12"), ["1"]);
    assert.deepEqual(await rowKeys(t, "L ne 13"), ["1"]); // missing property: false even for ne
    assert.deepEqual(await rowKeys(t, "S eq 12"), []);
    // listTablesSegmentedWithPrefix sends a Query Tables filter: TableName ge 'prefix' and lt 'prefix{'
    assert.deepEqual(await tableNames(t), [t]);
  })],
  [17, "filter errors", () => withTable(async (t) => {
    await fails(queryAll(t, new TableQuery().where("startswith(S, 'a')")), 501, "NotImplemented");
    await fails(queryAll(t, new TableQuery().where("S eq")), 400, "InvalidInput");
    await fails(queryAll(t, new TableQuery().where("I eq 2147483648")), 400, "InvalidInput");
  })],
  [18, "paging", () => withTable(async (t) => {
    for (let p = 0; p < 11; p++) {
      const batch = new TableBatch();
      for (let i = 0; i < 100; i++) batch.insertEntity(ent(`p${p % 3}`, `r${String(p * 100 + i).padStart(4, "0")}`));
      await call(svc, "executeBatch", t, batch);
    }
    const sizes = [];
    const seen = [];
    let token = null;
    do {
      const page = await first(svc, "queryEntities", t, new TableQuery().top(400), token);
      sizes.push(page.entries.length);
      seen.push(...page.entries.map((e) => `${e.PartitionKey._}/${e.RowKey._}`));
      token = page.continuationToken;
    } while (token);
    assert.deepEqual(sizes, [400, 400, 300]);
    assert.equal(new Set(seen).size, 1100);
    assert.deepEqual(seen, [...seen].sort());
    const firstPage = await first(svc, "queryEntities", t, null, null);
    assert.equal(firstPage.entries.length, 1000); // the server's page size without $top
    assert.ok(firstPage.continuationToken.nextPartitionKey);
  })],
  [19, "batch happy path", () => withTable(async (t) => {
    await call(svc, "insertEntity", t, ent("b", "3", { A: 1 }));
    await call(svc, "insertEntity", t, ent("b", "4", { A: 1 }));
    const batch = new TableBatch();
    batch.insertEntity(ent("b", "1", { A: 1 }));
    batch.insertOrMergeEntity(ent("b", "2", { A: 2 }));
    batch.replaceEntity(ent("b", "3", { A: 3 }));
    batch.deleteEntity(ent("b", "4"));
    const [results, response] = await call(svc, "executeBatch", t, batch);
    assert.equal(response.statusCode, 202);
    assert.deepEqual(results.map((r) => r.response.isSuccessful), [true, true, true, true]);
    assert.match(etagOf(results[0].entity), /^W\/"datetime'/);
    assert.deepEqual((await queryAll(t)).map((e) => e.RowKey._), ["1", "2", "3"]);
    assert.equal((await get(t, "b", "3")).A._, 3);
    const single = new TableBatch(); // a batch of one retrieve is sent as a plain GET by the SDK
    single.retrieveEntity("b", "2");
    const [[got]] = await call(svc, "executeBatch", t, single);
    assert.equal(got.entity.A._, 2);
  })],
  [20, "batch atomicity", () => withTable(async (t) => {
    await call(svc, "insertEntity", t, ent("b", "dup"));
    const batch = new TableBatch();
    batch.insertEntity(ent("b", "new"));
    batch.insertEntity(ent("b", "dup"));
    const err = await fails(call(svc, "executeBatch", t, batch), 409, "EntityAlreadyExists");
    assert.match(err.message, /^1:/);
    await fails(get(t, "b", "new"), 404);
  })],
  [21, "batch limits", () => withTable(async (t) => {
    const full = new TableBatch();
    for (let i = 0; i < 100; i++) full.insertEntity(ent("b", `r${i}`));
    await refusedBySdk(async () => full.insertEntity(ent("b", "r100")), /more than 100 operations/);
    await refusedBySdk(() => call(svc, "executeBatch", t, new TableBatch()), /must not be empty/);
    const two = new TableBatch();
    two.insertEntity(ent("b", "x"));
    await refusedBySdk(async () => two.insertEntity(ent("c", "x")), /same PartitionKey/);
    const dup = new TableBatch();
    dup.insertEntity(ent("b", "same"));
    dup.insertOrReplaceEntity(ent("b", "same"));
    await fails(call(svc, "executeBatch", t, dup), 400, "InvalidDuplicateRow");
    const big = "y".repeat(30000); // 100 entities x 2 x 30,000 characters: over the 4 MiB of a batch
    const huge = new TableBatch();
    for (let i = 0; i < 100; i++) huge.insertEntity(ent("b", `s${i}`, { S: big, T: big }));
    await fails(call(svc, "executeBatch", t, huge), 413);
    assert.deepEqual(await queryAll(t), []);
    await call(svc, "executeBatch", t, full);
    assert.equal((await queryAll(t)).length, 100);
  })],
  [22, "shared key", () => withTable(async (t) => {
    const wrong = service(Buffer.from("not the key").toString("base64"));
    await fails(call(wrong, "insertEntity", t, ent("p", "r")), 403, "AuthenticationFailed");
    await fails(call(wrong, "listTablesSegmented", null), 403, "AuthenticationFailed");
    await call(svc, "insertEntity", t, ent("p", "r"));
  })],
  [23, "table SAS", () => withTable(async (t) => {
    await call(svc, "insertEntity", t, ent("p", "r"));
    const expiry = new Date(Date.now() + 3600e3);
    const sas = (AccessPolicy, Id) => svc.generateSharedAccessSignature(t, { AccessPolicy, Id });
    const reader = sasService(sas({ Permissions: Perm.QUERY, Expiry: expiry }));
    assert.deepEqual((await first(reader, "queryEntities", t, null, null)).entries.map((e) => e.RowKey._), ["r"]);
    assert.equal((await first(reader, "retrieveEntity", t, "p", "r")).RowKey._, "r");
    await fails(call(reader, "insertEntity", t, ent("p", "x")), 403, "AuthorizationPermissionMismatch");
    const expired = sasService(sas({ Permissions: Perm.QUERY, Expiry: new Date(Date.now() - 60e3) }));
    await fails(call(expired, "retrieveEntity", t, "p", "r"), 403);
    const ranged = sasService(sas({ Permissions: Perm.QUERY + Perm.ADD, Expiry: expiry, StartPk: "a", EndPk: "m" }));
    await call(ranged, "insertEntity", t, ent("b", "r"));
    await fails(call(ranged, "insertEntity", t, ent("z", "r")), 403);
    await call(svc, "setTableAcl", t, { pol: { Permissions: "r", Start: new Date(Date.now() - 60e3), Expiry: expiry } });
    const viaPolicy = sasService(sas(undefined, "pol"));
    assert.equal((await first(viaPolicy, "retrieveEntity", t, "p", "r")).RowKey._, "r");
    await fails(call(viaPolicy, "insertEntity", t, ent("p", "y")), 403, "AuthorizationPermissionMismatch");
  })],
  [24, "ACL and service XML", () => withTable(async (t) => {
    const start = new Date("2020-01-01T00:00:00Z");
    await call(svc, "setTableAcl", t, {
      full: { Permissions: "raud", Start: start, Expiry: new Date("2030-01-01T00:00:00Z") }, bare: {},
    });
    const acl = (await first(svc, "getTableAcl", t)).signedIdentifiers;
    assert.deepEqual(Object.keys(acl).sort(), ["bare", "full"]);
    assert.equal(acl.full.Permissions, "raud");
    assert.equal(new Date(acl.full.Start).getTime(), start.getTime());
    await fails(call(svc, "setTableAcl", t, { w: { Permissions: "w" } }), 400, "InvalidXmlDocument");
    const props = await first(svc, "getServiceProperties");
    const cors = { CorsRule: [{ AllowedOrigins: ["http://ljs.example"], AllowedMethods: ["GET"], AllowedHeaders: [],
      ExposedHeaders: [], MaxAgeInSeconds: 5 }] };
    await call(svc, "setServiceProperties", { ...props, Cors: cors });
    const back = await first(svc, "getServiceProperties");
    assert.deepEqual(back.Cors.CorsRule[0].AllowedOrigins, ["http://ljs.example"]);
    await call(svc, "setServiceProperties", { ...back, Cors: {} });
    // Get Service Stats lives on the secondary: a connection string cannot name one, so in that mode the
    // documented host object gives it; the emulator mode has it already
    const statsSvc = mode === "emulator" ? svc : azure.createTableService(account, key, hosts);
    const stats = await first(statsSvc, "getServiceStats", { locationMode: azure.StorageUtilities.LocationMode.SECONDARY_ONLY });
    assert.equal(stats.GeoReplication.Status, "live");
    // the secondary serves queries; this SDK sends a point read or a write only to the primary
    await call(svc, "insertEntity", t, ent("p", "r"));
    const secondary = { locationMode: azure.StorageUtilities.LocationMode.SECONDARY_ONLY };
    const sent = [];
    statsSvc.on("sendingRequestEvent", (webResource) => sent.push(new URL(webResource.uri).pathname));
    const page = await first(statsSvc, "queryEntities", t, null, null, secondary);
    assert.deepEqual(page.entries.map((e) => e.RowKey._), ["r"]);
    assert.deepEqual(sent, [`/${account}-secondary/${t}`]);
    await refusedBySdk(() => call(statsSvc, "retrieveEntity", t, "p", "r", secondary), /primary storage location/);
    await refusedBySdk(() => call(statsSvc, "insertEntity", t, ent("p", "s"), secondary), /primary storage location/);
  })],
  [25, "protocol hygiene", () => withTable(async (t) => {
    const [, response] = await call(svc, "insertEntity", t, ent("p", "r"), { clientRequestId: "ljs-crid" });
    for (const h of ["x-ms-request-id", "x-ms-version", "date", "etag"]) assert.ok(response.headers[h], h);
    assert.equal(response.headers["x-ms-client-request-id"], "ljs-crid");
    const err = await fails(get(t, "p", "missing"), 404, "ResourceNotFound");
    assert.ok(err.requestId);
    const raw = await new Promise((resolve) => svc.retrieveEntity(t, "p", "missing", (_e, _r, resp) => resolve(resp)));
    assert.match(raw.headers["content-type"], /^application\/json/);
    assert.equal(raw.headers["x-ms-error-code"], "ResourceNotFound");
  })],
];

await runCases(cases);
