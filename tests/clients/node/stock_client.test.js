// A stock @grpc/grpc-js client of plegd: target unix:///path, insecure credentials, no channel
// options (grpc-js then sends its own default :authority). Run by tests/clients/run.sh as
//   PLEGD_SOCKET=/path/to/plegd.sock node --test stock_client.test.js
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const socket = process.env.PLEGD_SOCKET;
assert.ok(socket, 'PLEGD_SOCKET is not set');
const target = socket.startsWith('unix:') ? socket : `unix://${socket}`;

const loadOpts = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true };
const plegd = grpc.loadPackageDefinition(
  protoLoader.loadSync('plegd/v1/plegd.proto', {
    ...loadOpts,
    includeDirs: [path.join(__dirname, '..', '..', '..', 'cri-proto')],
  }),
).plegd.v1;
const healthPkg = grpc.loadPackageDefinition(
  protoLoader.loadSync('grpc/health/v1/health.proto', { ...loadOpts, includeDirs: [path.join(__dirname, 'proto')] }),
).grpc.health.v1;

const creds = grpc.credentials.createInsecure();
const client = new plegd.PodLifecycle(target, creds);
const health = new healthPkg.Health(target, creds);

const deadline = (s) => ({ deadline: new Date(Date.now() + s * 1000) });
const unary = (c, method, req, s = 10) =>
  new Promise((resolve, reject) => c[method](req, deadline(s), (err, res) => (err ? reject(err) : resolve(res))));

let listed;

test.after(() => {
  client.close();
  health.close();
});

test('health Check is SERVING', async () => {
  for (const service of ['', 'plegd.v1.PodLifecycle']) {
    const res = await unary(health, 'Check', { service });
    assert.equal(res.status, 'SERVING', `health(${JSON.stringify(service)})`);
  }
});

test('ListPods', async () => {
  listed = await unary(client, 'ListPods', {});
  assert.ok(listed.pods.length > 0, 'no pods (the sim keeps 5)');
  assert.ok(BigInt(listed.revision) > 0n, `revision ${listed.revision}`);
  assert.ok(BigInt(listed.epoch) > 0n, `epoch ${listed.epoch}`);
  for (const p of listed.pods) assert.ok(p.uid && p.name && p.namespace, `pod without identity ${JSON.stringify(p)}`);
  console.log(`node: ListPods: ${listed.pods.length} pods at revision ${listed.revision}, epoch ${listed.epoch}`);
});

test('GetPodStatus of a listed pod', async () => {
  // The runtime churns: a pod removed since the listing answers not_found, and the next
  // listed one is asked.
  let uid;
  let res;
  for (const pod of listed.pods) {
    uid = pod.uid;
    res = await unary(client, 'GetPodStatus', { pod_uid: uid });
    if (!res.not_found) break;
  }
  assert.equal(res.not_found, false, `every one of the ${listed.pods.length} listed pods answered not_found`);
  assert.ok(res.pod, 'no pod');
  assert.equal(res.pod.uid, uid);
  console.log(`node: GetPodStatus(${uid}): ${res.pod.namespace}/${res.pod.name}, ${res.pod.containers.length} containers`);
});

test('Watch: snapshot, synced, then 3 live events', async () => {
  const kinds = [];
  const events = [];
  let snapshots = 0;
  let synced = null;
  let last = 0n;
  const call = client.Watch({ since_revision: 0 }, deadline(60));
  await new Promise((resolve, reject) => {
    let done = false;
    const fail = (e) => {
      if (!done) {
        done = true;
        call.cancel();
        reject(e);
      }
    };
    call.on('data', (m) => {
      if (done) return;
      try {
        kinds.push(m.kind);
        if (m.kind === 'snapshot') {
          assert.equal(synced, null, 'snapshot after synced');
          snapshots++;
        } else if (m.kind === 'synced') {
          synced = m;
          assert.equal(m.synced.pods, snapshots, 'synced.pods != snapshots seen');
          assert.equal(m.synced.epoch, listed.epoch, 'synced epoch != ListPods epoch');
        } else if (m.kind === 'event') {
          assert.ok(synced, 'event before synced');
          const rev = BigInt(m.revision);
          assert.ok(rev > last, `revision ${rev} after ${last}`);
          last = rev;
          events.push(m);
          if (events.length >= 3) {
            done = true;
            call.cancel();
            resolve();
          }
        } else if (m.kind === 'reset') {
          throw new Error(`unexpected reset ${JSON.stringify(m.reset)}`);
        }
      } catch (e) {
        fail(e);
      }
    });
    call.on('error', (e) => {
      if (!done) fail(e);
    });
    call.on('end', () => fail(new Error(`stream ended early: ${kinds}`)));
  });
  assert.equal(kinds[0], 'start', `first message ${kinds[0]}`);
  assert.ok(BigInt(events[0].revision) > BigInt(synced.revision), 'first event not after synced');
  console.log(
    `node: Watch: start, ${snapshots} snapshots, synced@${synced.revision}, events ` +
      `[${events.map((e) => e.revision)}] [${events.map((e) => e.event.type)}]`,
  );
});
